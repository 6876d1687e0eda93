# SPDX-License-Identifier: BSD-3-Clause
"""The Python half of the resume_training example: a training run handed from Python to C++ and back.

usage: resume_training.py start DIR    trains 3 steps, saves DIR/python.pt (and DIR/data.pt)
       resume_training.py finish DIR   resumes DIR/cpp.pt (which resume_training.cpp wrote after
                                       3 more steps), trains the last 3 steps and checks that the
                                       9 losses are those of one uninterrupted Python run

The checkpoints are what training scripts save:
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                "losses": losses}, path)
"""
import pathlib
import sys

import torch

STEPS = 9


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=1e-4)


def train(model, opt, data, first, last, losses):
    for step in range(first, last):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data["x"][step]), data["y"][step])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"python step {step + 1}: loss {loss.item():.6f}")


def start(d):
    torch.manual_seed(0)
    x = torch.rand(STEPS, 32, 2) * 4 - 2
    data = {"x": x, "y": (x[..., :1] * x[..., 1:]).sin()}
    model = make_model()
    torch.save({"init": model.state_dict(), **data}, d / "data.pt")
    opt = make_optimizer(model)
    losses = []
    train(model, opt, data, 0, 3, losses)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
                "losses": losses}, d / "python.pt")


def finish(d):
    data = torch.load(d / "data.pt", weights_only=True)
    ckpt = torch.load(d / "cpp.pt", weights_only=True)
    model = make_model()
    model.load_state_dict(ckpt["model"])
    opt = make_optimizer(model)
    opt.load_state_dict(ckpt["optimizer"])
    losses = list(ckpt["losses"])
    train(model, opt, data, ckpt["epoch"], STEPS, losses)

    # The same 9 steps in one Python run.
    model = make_model()
    model.load_state_dict(data["init"])
    opt = make_optimizer(model)
    one_run = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data["x"][step]), data["y"][step])
        loss.backward()
        opt.step()
        one_run.append(loss.item())
    print("step  handed over (Python 1-3, C++ 4-6, Python 7-9)  one Python run")
    for step, (a, b) in enumerate(zip(losses, one_run)):
        print(f"{step + 1:4d}  {a:.9f}  {b:.9f}")
    # Adam's first moment: libtorch computes mul_ + add_, Python lerp_; the last bits differ.
    if len(losses) != STEPS or any(abs(a - b) > 1e-6 * abs(b) + 1e-9 for a, b in zip(losses, one_run)):
        print("resume_training: the handed-over run does not continue as one run")
        sys.exit(1)
    print("resume_training: the losses continue as one run would")


if __name__ == "__main__":
    torch.set_num_threads(1)
    directory = pathlib.Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    {"start": start, "finish": finish}[sys.argv[1]](directory)
