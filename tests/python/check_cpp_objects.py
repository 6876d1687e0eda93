# SPDX-License-Identifier: BSD-3-Clause
"""Checks objects written by modhooks::save_object with Python's torch.load(weights_only=True).

usage: check_cpp_objects.py DIR

DIR/cpp_values.pt holds what object_test.cpp's SaveObjectWritesWhatPythonReads builds;
DIR/cpp_checkpoint.pt is checkpoint.pt (oracle_objects.py) loaded by load_object and saved
by save_object, which must equal the original up to what an IValue cannot hold (an
OrderedDict's class and _metadata, a Counter's class, torch.Size as a tuple, a dtype as the int
of its ScalarType). Exit status 1 on any mismatch.
"""
import collections
import pathlib
import sys

import torch

from oracle_objects import checkpoint

FAILED = []


def expect(cond, what):
    if not cond:
        FAILED.append(what)
        print("mismatch:", what)


def same(a, b, where):
    """Deep equality; tensors bit for bit with dtype, shape and requires_grad."""
    if isinstance(b, torch.Tensor):
        expect(isinstance(a, torch.Tensor), f"{where}: {type(a)} is not a tensor")
        if isinstance(a, torch.Tensor):
            expect(a.dtype == b.dtype and a.shape == b.shape, f"{where}: dtype or shape")
            expect(a.requires_grad == b.requires_grad, f"{where}: requires_grad")
            expect(a.dtype == b.dtype and a.shape == b.shape and
                   torch.equal(a.detach().view(-1).view(torch.uint8) if a.numel() else a,
                               b.detach().contiguous().view(-1).view(torch.uint8) if b.numel() else b),
                   f"{where}: values")
        return
    if isinstance(b, torch.Size):
        b = tuple(b)
    if isinstance(b, torch.dtype):
        expect(isinstance(a, int), f"{where}: a dtype comes back as an int")
        return
    if isinstance(b, dict):
        expect(type(a) is dict, f"{where}: {type(a)} is not a dict")
        expect(list(a.keys()) == list(b.keys()), f"{where}: keys {list(a)} != {list(b)}")
        for k in b:
            if k in a:
                same(a[k], b[k], f"{where}[{k!r}]")
        return
    expect(type(a) is type(b), f"{where}: {type(a)} != {type(b)}")
    if isinstance(b, (list, tuple)):
        expect(len(a) == len(b), f"{where}: length")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
        return
    expect(a == b, f"{where}: {a!r} != {b!r}")


def main(d):
    values = torch.load(d / "cpp_values.pt", weights_only=True)
    want = {
        "none": None, "true": True, "int": -(2**40), "float": 0.1, "str": "h\u00e9llo",
        "complex": complex(1, -1), "cpu": torch.device("cpu"), "cuda": torch.device("cuda", 2),
        "tuple": (1, (2.5, "x")), "list": [1, 2, 3], "int_keys": {3: "three", -1: "minus one"},
        "tensor": torch.arange(6, dtype=torch.float32).view(2, 3),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "grad": torch.ones(2, requires_grad=True),
        "empty": {"list": [], "dict": {}, "tuple": ()},
    }
    same(values["values"], want, "values")
    twice = values["twice"]
    expect(twice[0] is twice[1], "a tensor saved twice is one tensor")
    expect(values["dicts"][0] is values["dicts"][1], "a dict saved twice is one dict")
    first, second = values["storage"]
    expect(first.dtype == torch.uint8 and bytes(first._untyped_storage.tolist()) ==
           torch.arange(3, dtype=torch.float32).numpy().tobytes(),
           "a storage on its own reads back as its bytes")
    expect(first._untyped_storage is second._untyped_storage, "a storage saved twice is one")
    view = values["transposed"]
    expect(view.is_contiguous() and torch.equal(view, torch.arange(6.0).view(2, 3).t()),
           "a transposed view is written contiguous")

    original = checkpoint()
    loaded = torch.load(d / "cpp_checkpoint.pt", weights_only=True)
    same(loaded, original, "checkpoint")
    expect(loaded["same"][0] is loaded["same"][1], "the tensor held twice stays one tensor")
    expect(loaded["shared"][0] is loaded["shared"][1], "the dict held twice stays one dict")
    # The model state dict, without _metadata, still loads into the model.
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2))
    model.load_state_dict(loaded["model"])
    opt = torch.optim.Adam(model.parameters(), lr=0.5)
    opt.load_state_dict(loaded["optimizer"])
    expect(opt.param_groups[0]["lr"] == 0.01, "the optimizer state loads in Python")
    if FAILED:
        sys.exit(1)
    print("check_cpp_objects: all match")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
