# SPDX-License-Identifier: BSD-3-Clause
"""Inner-submodule hooks: TorchScript models for tests/jit_instrument_test.cpp and Python's answers.

Saves one model scripted (`inner_scripted.pt`), traced (`inner_traced.pt`), frozen
(`inner_frozen.pt`), and a model whose inner block raises (`inner_raising.pt`). Python refuses
hooks on script modules, so the answers come from the eager model with the same weights: the
hooks the C++ test registers on the inner submodules of the script models are registered here on
the eager submodules, and what they saw (order, arguments, outputs, gradients) is recorded.
"""
import json
import warnings

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


class Raising(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 1000.0):
            raise RuntimeError("inner block refused its input")
        return x * 2


class RaisingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Raising()

    def forward(self, x):
        return self.inner(x) + 1


def values(t):
    return t.detach().double().tolist() if t is not None else None


def run_hooks(net, x):
    """The scenario of InnerHooks.MatchPythonEager, on eager submodules."""
    events = []
    block0, block1, head = net.block[0], net.block[1], net.head
    handles = [
        block0.register_forward_pre_hook(
            lambda m, args: events.append(["pre block.0", values(args[0])])),
        block0.register_forward_hook(
            lambda m, args, out: events.append(["forward block.0", values(out)])),
        # Rewrites an inner layer's output.
        block1.fc.register_forward_hook(
            lambda m, args, out: (events.append(["forward block.1.fc", values(out)]), out + 1)[1]),
        # Doubles the gradient reaching block 0.
        block0.register_full_backward_pre_hook(
            lambda m, go: (events.append(["backward_pre block.0", values(go[0])]),
                           (go[0] * 2,))[1]),
        block0.register_full_backward_hook(
            lambda m, gi, go: events.append(
                ["backward block.0", values(gi[0]), values(go[0])])),
        head.register_full_backward_hook(
            lambda m, gi, go: events.append(["backward head", values(gi[0]), values(go[0])])),
    ]
    x = x.clone().requires_grad_()
    out = net(x)
    out.sum().backward()
    for h in handles:
        h.remove()
    return {
        "events": events,
        "output": values(out),
        "x_grad": values(x.grad),
        "block0_weight_grad": values(net.block[0].fc.weight.grad),
    }


def global_forward_order(net, x):
    """Class names in the order a global forward hook sees them."""
    names = []
    h = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: names.append(type(m).__name__))
    net(x)
    h.remove()
    return names


def main(out_dir):
    warnings.filterwarnings("ignore", category=FutureWarning)  # TorchScript is deprecated
    torch.manual_seed(1)
    net = Net()
    x = torch.randn(3, 4)
    torch.jit.script(net).save(str(out_dir / "inner_scripted.pt"))
    torch.jit.trace(net, x).save(str(out_dir / "inner_traced.pt"))
    torch.jit.freeze(torch.jit.script(net).eval()).save(str(out_dir / "inner_frozen.pt"))
    torch.jit.script(RaisingNet()).save(str(out_dir / "inner_raising.pt"))
    with torch.no_grad():
        plain = values(net(x))
    result = {"x": values(x), "plain_output": plain, "hooks": run_hooks(net, x),
              "global_forward_order": global_forward_order(net, x)}
    (out_dir / "jit_inner_oracle.json").write_text(json.dumps(result))
