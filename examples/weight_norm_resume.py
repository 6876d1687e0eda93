# SPDX-License-Identifier: BSD-3-Clause
"""A weight-normed 1-D convolution stack (as vocoders such as HiFi-GAN build theirs) trained in
Python, resumed in C++ (weight_norm_resume.cpp), resumed again in Python.

  python weight_norm_resume.py start <dir>   trains STEPS steps, saves model.pt and data.pt
  weight_norm_resume <dir>                   loads model.pt, trains STEPS steps, saves cpp.pt
  python weight_norm_resume.py finish <dir>  loads cpp.pt, trains STEPS steps, and checks that
                                             the losses are those of one Python run
"""
import pathlib
import sys
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore", category=FutureWarning)  # the hook form is deprecated
STEPS = 5
LR = 0.05


def make_model():
    wn = torch.nn.utils.weight_norm
    return nn.Sequential(wn(nn.Conv1d(1, 8, 5, padding=2)), nn.LeakyReLU(0.1),
                         wn(nn.Conv1d(8, 8, 3, padding=1)), nn.LeakyReLU(0.1),
                         wn(nn.Conv1d(8, 1, 3, padding=1)))


def train(model, x, y, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def data():
    torch.manual_seed(0)
    t = torch.linspace(0, 6.283, 64)
    y = torch.sin(t).reshape(1, 1, 64)
    return y + 0.3 * torch.randn(1, 1, 64), y


def main(mode, folder):
    folder = pathlib.Path(folder)
    x, y = data()
    if mode == "start":
        folder.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(1)
        model = make_model()
        losses = train(model, x, y, STEPS)
        torch.save(model.state_dict(), folder / "model.pt")
        torch.save({"x": x, "y": y, "losses": torch.tensor(losses)}, folder / "data.pt")
        print("python: trained", STEPS, "steps, loss", losses[-1])
        return 0
    model = make_model()
    model.load_state_dict(torch.load(folder / "cpp.pt"))  # strict: Python's keys
    cpp_losses = torch.load(folder / "cpp_losses.pt")["losses"].tolist()
    losses = torch.load(folder / "data.pt")["losses"].tolist() + cpp_losses
    losses += train(model, x, y, STEPS)
    torch.manual_seed(1)
    one_run = train(make_model(), x, y, 3 * STEPS)
    worst = max(abs(a - b) for a, b in zip(losses, one_run))
    if worst > 1e-5:
        print(f"the losses differ from one Python run by up to {worst}", file=sys.stderr)
        return 1
    print(f"python, C++, python: the losses continue as one run would (within {worst:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
