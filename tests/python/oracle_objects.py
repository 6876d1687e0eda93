# SPDX-License-Identifier: BSD-3-Clause
"""Training checkpoints and other weights-only objects written by Python's torch.save.

Writes under <out>/objects/:
- checkpoint.pt: what a training script saves, {"model": state_dict, "optimizer":
  optimizer.state_dict(), "epoch": 3, ...} beside every other kind of value load_object reads
  (OrderedDict with _metadata, Counter, tuples, lists, torch.Size, devices, a dtype, complex,
  int keys, views sharing a storage, a tensor and a dict referred to twice); object_test.cpp
  checks what it loads as;
- deep.pt (lists nested 40 deep), set.pt (a set), bytes.pt (bytes): objects load_object refuses.
check_cpp_objects.py reads back what the C++ tests write.
"""
import collections
import pathlib

import torch


def checkpoint():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 3)).square().mean().backward()
        opt.step()
    base = torch.arange(12, dtype=torch.float32)
    shared = {"k": torch.tensor([1, 2], dtype=torch.int64)}
    same = torch.tensor([7.5, 8.5], dtype=torch.float64)
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "loss": 0.25,
        "name": "run-\u00e9",
        "flags": [True, False],
        "nothing": None,
        "tuple": (1, "a", 2.5),
        "size": torch.Size([2, 3]),
        "cpu": torch.device("cpu"),
        "cuda1": torch.device("cuda", 1),
        "dtype": torch.float16,
        "complex": complex(1.5, -2.0),
        "int_keys": {0: "zero", 7: "seven", -3: "minus three"},
        "big": 2**40,
        "negative": -5,
        "counter": collections.Counter({"a": 2}),
        "ordered": collections.OrderedDict([("z", 1), ("a", 2)]),
        "views": [base, base[2:8].view(2, 3), base[::4]],
        "same": [same, same],
        "shared": [shared, shared],
        "empty": {"list": [], "dict": {}, "tuple": ()},
        "nested": {"a": [1, [2, [3, {"b": torch.ones(2, dtype=torch.bfloat16)}]]]},
    }


def main(out: pathlib.Path):
    d = out / "objects"
    d.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint(), d / "checkpoint.pt")
    deep = []
    for _ in range(40):
        deep = [deep]
    torch.save(deep, d / "deep.pt")
    torch.save({"s": {1, 2}}, d / "set.pt")
    torch.save({"b": b"\x00\x01"}, d / "bytes.pt")
