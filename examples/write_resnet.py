# SPDX-License-Identifier: BSD-3-Clause
"""Writes the Python side of the inspect_torchscript example into <dir> (default: current folder).

resnet_traced.pt: a small ResNet-style model (a stem, two stages of two basic blocks with
BatchNorm, a classifier), traced in eval mode and saved, the way a model reaches C++.
resnet_expected.pt: an input batch and what Python's eager hooks saw on the same model with the
same weights: the mean and standard deviation of each block's output, and the input gradient
when a full backward hook halves the gradient flowing out of `layer2.0`.
"""
import pathlib
import sys
import warnings

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 8, 1))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


BLOCKS = ["layer1.0", "layer1.1", "layer2.0", "layer2.1"]

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
out.mkdir(parents=True, exist_ok=True)
warnings.filterwarnings("ignore", category=FutureWarning)  # TorchScript is deprecated
torch.manual_seed(0)
model = ResNet().eval()
for m in model.modules():  # running statistics that are not the identity
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.1, 0.1)
        m.running_var.uniform_(0.5, 1.5)
x = torch.randn(4, 3, 16, 16)
torch.jit.trace(model, x).save(str(out / "resnet_traced.pt"))

expected = {"input": x}
handles = []
for name in BLOCKS:
    def stats(m, args, output, name=name):
        expected["stats." + name] = torch.stack([output.mean(), output.std()]).detach()
    handles.append(model.get_submodule(name).register_forward_hook(stats))
handles.append(model.get_submodule("layer2.0").register_full_backward_hook(
    lambda m, grad_input, grad_output: (grad_input[0] * 0.5,)))
xg = x.clone().requires_grad_()
y = model(xg)
y.sum().backward()
expected["output"] = y.detach()
expected["input_grad"] = xg.grad
torch.save(expected, out / "resnet_expected.pt")
print(f"write_resnet: wrote {out / 'resnet_traced.pt'} and {out / 'resnet_expected.pt'}")
