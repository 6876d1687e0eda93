# SPDX-License-Identifier: BSD-3-Clause
"""Writes the Python side of the python_checkpoint example into <dir> (default: current folder).

classifier.pt: `torch.save(model.state_dict())` of a Python Sequential, keys "0.weight",
"0.bias", "2.weight", "2.bias", exactly as training code in Python writes it.
classifier_io.pt: an input batch and what the Python model computes on it, so that the C++
side can show it computes the same.
"""
import pathlib
import sys

import torch

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
torch.save(model.state_dict(), out / "classifier.pt")
x = torch.randn(6, 4)
with torch.no_grad():
    torch.save({"input": x, "output": model(x)}, out / "classifier_io.pt")
print(f"write_checkpoint: wrote {out / 'classifier.pt'} and {out / 'classifier_io.pt'}")
