# SPDX-License-Identifier: BSD-3-Clause
"""The nn utilities in the patterns people train with, in Python, for tests/nn_utils_patterns.h
to replay in C++ (float64 throughout, so that the two agree to rounding). Writes under
<out>/nn_utils/patterns/:
- <name>.pt: "init.<key>" the module's state dict before the utilities, "x<i>" its inputs,
  "step<k>.grad.<name>" the gradient of every parameter before the k-th optimizer step,
  "final.<key>" the state dict at the end, "eval" the output in eval mode without grad (computed
  twice: "eval_again" must be the same);
- patterns.json: per scenario its procedure, module and utilities, which C++ reads.

An RNN runs as Python runs it: RNNBase's _update_flat_weights reads a parametrized flat weight
up to 4 times per forward, each read computing it (spectral_norm steps its power iteration at
each), which C++ replays; "lstm_cached" runs each forward inside parametrize.cached(), once.
"lstm2" has utilities on both weights of its layer: "mixed" puts the hook form weight_norm on
the first and parametrizations.spectral_norm on the second.

The procedures:
- "twice": the module runs on two inputs before one backward (the SN-GAN discriminator step,
  loss = f(D(x0)) - g(D(x1))), SGD built after the utilities, 3 steps; floating-point inputs
  require grad, and their gradients ("step<k>.grad_x<i>") are compared too: they read the
  weights each forward saved for backward;
- "accumulate": 3 micro-batches, each a forward and a backward of loss / 3, before each step;
- "shared": the module called twice in one forward, m(m(x0));
- "prune_first": SGD built before pruning; each step prunes 25% more of the weight
  (iterative pruning), the last removes the pruning, and training goes on after it;
- "parametrize_first": SGD built before the parametrization, which is removed
  (leave_parametrized) after two steps, and training goes on after it.
"""
import json
import warnings
import pathlib

import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize, prune

warnings.filterwarnings("ignore", category=FutureWarning)

STEPS = 3
LR = 0.05


class Symmetric(nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(0, 1)

    def right_inverse(self, a):
        return a.triu()


def build(kind):
    """The module of a kind and its two inputs (seeded)."""
    torch.manual_seed(0)
    if kind == "linear":
        return nn.Linear(5, 4), [torch.randn(3, 5), torch.randn(3, 5)]
    if kind == "square":
        return nn.Linear(4, 4), [torch.randn(3, 4), torch.randn(3, 4)]
    if kind == "conv1d":
        return nn.Conv1d(3, 4, 3), [torch.randn(2, 3, 8), torch.randn(2, 3, 8)]
    if kind == "conv2d":
        return nn.Conv2d(2, 4, 3), [torch.randn(2, 2, 6, 6), torch.randn(2, 2, 6, 6)]
    if kind == "convt2d":
        return nn.ConvTranspose2d(3, 2, 3), [torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)]
    if kind == "embedding":
        return nn.Embedding(6, 4), [torch.tensor([[0, 2, 5], [1, 1, 4]]),
                                    torch.tensor([[3, 2, 0], [5, 5, 1]])]
    if kind in ("lstm", "lstm_cached", "lstm2"):
        return nn.LSTM(3, 4), [torch.randn(5, 2, 3), torch.randn(5, 2, 3)]
    if kind == "disc_conv":  # an SN-GAN discriminator
        return (nn.Sequential(nn.Conv2d(3, 4, 3), nn.LeakyReLU(0.2), nn.Conv2d(4, 3, 3)),
                [torch.randn(2, 3, 7, 7), torch.randn(2, 3, 7, 7)])
    if kind == "disc_linear":
        return (nn.Sequential(nn.Linear(6, 5), nn.LeakyReLU(0.2), nn.Linear(5, 3)),
                [torch.randn(4, 6), torch.randn(4, 6)])
    raise KeyError(kind)


def tensor_name(kind):
    return "weight_hh_l0" if kind.startswith("lstm") else "weight"


def targets(module, kind):
    """The (module, tensor name) pairs a utility goes on: each layer with weights."""
    if kind == "lstm2":
        return [(module, "weight_ih_l0"), (module, "weight_hh_l0")]
    if kind.startswith("disc_"):
        return [(module[0], "weight"), (module[2], "weight")]
    return [(module, tensor_name(kind))]


UTILITIES = {
    "wn": lambda m, n: torch.nn.utils.weight_norm(m, n),
    "sn": lambda m, n: torch.nn.utils.spectral_norm(m, n),
    "pwn": lambda m, n: parametrizations.weight_norm(m, n),
    "psn": lambda m, n: parametrizations.spectral_norm(m, n),
    "prune": lambda m, n: prune.l1_unstructured(m, n, 0.3),
    "psym": lambda m, n: parametrize.register_parametrization(m, n, Symmetric()),
}


def scenarios():
    """name -> (procedure, module kind, utility)."""
    out = {}
    for kind in ["linear", "conv1d", "conv2d", "convt2d", "embedding", "lstm"]:
        for utility in ["wn", "sn", "pwn", "psn", "prune"]:
            out[f"twice_{utility}_{kind}"] = ("twice", kind, utility)
    for utility in ["psn", "pwn", "mixed"]:
        out[f"twice_{utility}_lstm2"] = ("twice", "lstm2", utility)
    out["twice_psn_lstm_cached"] = ("twice", "lstm_cached", "psn")
    for kind in ["disc_conv", "disc_linear"]:
        for utility in ["sn", "psn"]:
            out[f"sngan_{utility}_{kind}"] = ("twice", kind, utility)
    out["accumulate_wn_conv1d"] = ("accumulate", "conv1d", "wn")
    out["accumulate_pwn_linear"] = ("accumulate", "linear", "pwn")
    out["shared_wn_square"] = ("shared", "square", "wn")
    out["shared_psn_square"] = ("shared", "square", "psn")
    out["prune_first_linear"] = ("prune_first", "linear", "prune")
    out["prune_first_conv2d"] = ("prune_first", "conv2d", "prune")
    out["parametrize_first_psym_square"] = ("parametrize_first", "square", "psym")
    out["parametrize_first_psn_linear"] = ("parametrize_first", "linear", "psn")
    for utility in ["wn", "sn", "pwn", "psn", "prune", "psym"]:
        out[f"validate_{utility}_square"] = ("validate", "square", utility)
    out["validate_wn_conv1d"] = ("validate", "conv1d", "wn")
    return out


def output(module, kind, x):
    if kind == "lstm_cached":
        with parametrize.cached():
            return module(x)[0]
    if kind.startswith("lstm"):
        return module(x)[0]
    return module(x)


def apply(module, kind, utility):
    torch.manual_seed(1)
    for i, (m, n) in enumerate(targets(module, kind)):
        if utility == "mixed":
            UTILITIES["wn" if i == 0 else "psn"](m, n)
        else:
            UTILITIES[utility](m, n)


def run(name, procedure, kind, utility):
    module, xs = build(kind)
    module = module.double()
    xs = [x.double() if x.is_floating_point() else x for x in xs]
    record = {}
    for key, value in module.state_dict().items():
        record["init." + key] = value.clone()
    for i, x in enumerate(xs):
        record[f"x{i}"] = x
    # "validate": trained in eval mode, with a forward without grad (a validation or logging
    # forward) between each backward and the optimizer's step.
    if procedure == "validate":
        module.eval()
    else:
        module.train()

    def grads(step):
        for pname, p in module.named_parameters():
            if p.grad is not None:
                record[f"step{step}.grad.{pname}"] = p.grad.clone()

    if procedure in ("prune_first", "parametrize_first"):
        optimizer = torch.optim.SGD(module.parameters(), lr=LR)
        if procedure == "parametrize_first":
            apply(module, kind, utility)
    else:
        apply(module, kind, utility)
        optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    for step in range(STEPS + (1 if procedure.endswith("_first") else 0)):
        if procedure == "prune_first" and step < STEPS:
            for m, n in targets(module, kind):
                prune.l1_unstructured(m, n, 0.25)
        if procedure == "prune_first" and step == STEPS:
            for m, n in targets(module, kind):
                prune.remove(m, n)
        if procedure == "parametrize_first" and step == 2:
            for m, n in targets(module, kind):
                parametrize.remove_parametrizations(m, n, leave_parametrized=True)
        optimizer.zero_grad()
        if procedure == "accumulate":
            for i in range(3):
                x = xs[i % 2] * (i + 1)
                (output(module, kind, x).pow(2).mean() / 3).backward()
        elif procedure == "shared":
            output(module, kind, output(module, kind, xs[0])).pow(2).sum().backward()
        elif procedure == "twice":
            inputs = [x.clone().requires_grad_() if x.is_floating_point() else x for x in xs]
            (output(module, kind, inputs[0]).pow(2).mean()
             - output(module, kind, inputs[1]).mean()).backward()
            for i, x in enumerate(inputs):
                if x.requires_grad:
                    record[f"step{step}.grad_x{i}"] = x.grad.clone()
        else:
            output(module, kind, xs[0]).pow(2).sum().backward()
        if procedure == "validate":
            with torch.no_grad():
                record[f"step{step}.validate"] = output(module, kind, xs[1]).clone()
        grads(step)
        optimizer.step()
    for key, value in module.state_dict().items():
        record["final." + key] = value.detach().clone()
    module.eval()
    with torch.no_grad():
        record["eval"] = output(module, kind, xs[0]).clone()
        record["eval_again"] = output(module, kind, xs[0]).clone()
    return record


def main(out):
    out = pathlib.Path(out) / "nn_utils" / "patterns"
    out.mkdir(parents=True, exist_ok=True)
    table = {}
    for name, (procedure, kind, utility) in scenarios().items():
        torch.save(run(name, procedure, kind, utility), out / f"{name}.pt")
        table[name] = {"procedure": procedure, "kind": kind, "utility": utility}
    version = ".".join(torch.__version__.split(".")[:2])
    (out / "patterns.json").write_text(json.dumps({"torch": version, "scenarios": table},
                                                  indent=1))


if __name__ == "__main__":
    main("fixtures")
