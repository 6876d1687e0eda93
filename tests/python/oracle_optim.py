# SPDX-License-Identifier: BSD-3-Clause
"""Optimizer states of a model trained in Python, and the parameters it has at every later step.

For each optimizer in CONFIGS, a Sequential(Linear(4, 8), Tanh, Linear(8, 2)) with two parameter
groups (the layers, with different hyper-parameters) is trained on fixed batches with MSE loss.
Writes under <out>/optim/:
- data.pt: {"init": the model's initial state dict, "x": [STEPS, 16, 4], "y": [STEPS, 16, 2]};
- <name>.pt: {"model", "optimizer", "epoch": RESUME} after RESUME steps, as a training script
  saves it;
- <name>_expected.pt: {"params": [the four parameters after step s for s in 1..STEPS]}.
optim_test.cpp resumes each checkpoint in libtorch and compares every later step with these;
resume_optim.py resumes what the C++ side saves and compares the same way.
"""
import pathlib

import torch

STEPS = 8
RESUME = 3

# name -> (class, group 0 options, group 1 options); both groups differ from the defaults.
CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
            dict(lr=0.05, momentum=0.8, nesterov=True)),
    "adam": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02),
             dict(lr=0.003, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, betas=(0.85, 0.995), weight_decay=0.05),
              dict(lr=0.004, weight_decay=0.0, amsgrad=True)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01, alpha=0.9, momentum=0.5, weight_decay=0.01),
                dict(lr=0.005, centered=True, eps=1e-5)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                                          initial_accumulator_value=0.1),
                dict(lr=0.05, eps=1e-8)),
}


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def make_optimizer(name, model):
    cls, g0, g1 = CONFIGS[name]
    return cls([dict(params=list(model[0].parameters()), **g0),
                dict(params=list(model[2].parameters()), **g1)])


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def data():
    torch.manual_seed(1)
    model = make_model()
    return {"init": model.state_dict(), "x": torch.randn(STEPS, 16, 4),
            "y": torch.randn(STEPS, 16, 2)}


def run(name, d, on_step):
    """Trains from d["init"] for STEPS steps, calling on_step(step, model, opt) after each."""
    model = make_model()
    model.load_state_dict(d["init"])
    opt = make_optimizer(name, model)
    for s in range(STEPS):
        train_step(model, opt, d["x"][s], d["y"][s])
        on_step(s + 1, model, opt)


def main(out: pathlib.Path):
    torch.set_num_threads(1)
    o = out / "optim"
    o.mkdir(parents=True, exist_ok=True)
    d = data()
    torch.save(d, o / "data.pt")
    for name in CONFIGS:
        params = []

        def on_step(step, model, opt):
            params.append([p.detach().clone() for p in model.parameters()])
            if step == RESUME:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "epoch": RESUME}, o / f"{name}.pt")

        run(name, d, on_step)
        torch.save({"params": params}, o / f"{name}_expected.pt")
