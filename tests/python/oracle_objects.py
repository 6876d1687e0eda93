# SPDX-License-Identifier: BSD-3-Clause
"""Training checkpoints and other weights-only objects written by Python's torch.save.

Writes under <out>/objects/:
- checkpoint.pt: what a training script saves, {"model": state_dict, "optimizer":
  optimizer.state_dict(), "epoch": 3, ...} beside every other kind of value load_object reads
  (OrderedDict with _metadata, Counter, tuples, lists, torch.Size, devices, a dtype, complex,
  int keys, views sharing a storage, a tensor and a dict referred to twice); object_test.cpp
  checks what it loads as;
- deep.pt (lists nested 40 deep), set.pt (a set), bytes.pt (bytes): objects load_object refuses;
- legacy_checkpoint.pt: the training checkpoint in the legacy format
  (_use_new_zipfile_serialization=False), legacy_state_dict.pt: the model's state dict alone in it, and legacy_big_endian.pt: a state
  dict written as a big-endian host writes it (sys_info little_endian False, bytes swapped).
check_cpp_objects.py reads back what the C++ tests write.
"""
import collections
import io
import pathlib
import pickle
import pickletools
import sys

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
    legacy = checkpoint()
    torch.save(legacy, d / "legacy_checkpoint.pt", _use_new_zipfile_serialization=False)
    torch.save(legacy["model"], d / "legacy_state_dict.pt", _use_new_zipfile_serialization=False)
    write_big_endian(d / "legacy_big_endian.pt")


def write_big_endian(path):
    """A legacy file as a big-endian host writes it: sys_info says so and every element's bytes
    are swapped; it holds {"w": arange(6) as float32, "i": [1, 2] as int64}."""
    buf = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.float32), "i": torch.tensor([1, 2])}, buf,
               _use_new_zipfile_serialization=False)
    f = io.BytesIO(buf.getvalue())
    magic, protocol, info = pickle.load(f), pickle.load(f), pickle.load(f)
    obj_start = f.tell()
    # Skip the object's pickle without running it: pickletools finds its STOP.
    for op, _, _ in pickletools.genops(f):
        if op.name == "STOP":
            break
    obj_end = f.tell()
    keys = pickle.load(f)
    data_start = f.tell()
    raw = buf.getvalue()
    out = io.BytesIO()
    for value in (magic, protocol, dict(info, little_endian=False)):
        pickle.dump(value, out, protocol=2)
    out.write(raw[obj_start:obj_end])
    pickle.dump(keys, out, protocol=2)
    f.seek(data_start)
    by_key = {}
    for key in keys:
        numel = int.from_bytes(f.read(8), sys.byteorder)
        by_key[key] = (numel, f.read(numel * (4 if numel == 6 else 8)))
    for key in keys:
        numel, data = by_key[key]
        width = 4 if numel == 6 else 8
        out.write(numel.to_bytes(8, "little"))
        out.write(b"".join(data[i:i + width][::-1] for i in range(0, len(data), width)))
    path.write_bytes(out.getvalue())
