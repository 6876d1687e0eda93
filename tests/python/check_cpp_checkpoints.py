# SPDX-License-Identifier: BSD-3-Clause
"""Checks checkpoint files written by modhooks::save against what Python reads from them.

usage: check_cpp_checkpoints.py EXPECTED_JSON FILE=NAME [FILE=NAME ...]

Each FILE is loaded the way a Python user would load it (torch.load(weights_only=True), or
safetensors.torch.load_file for .safetensors) and compared bit-exact with entry NAME of
EXPECTED_JSON (written by oracle_checkpoints.py): keys and their order, dtype, shape, bytes,
requires_grad, `_metadata`; tensors must come back contiguous. Exit status 1 on any mismatch.
"""
import collections
import json
import pathlib
import sys

import safetensors.torch
import torch

from oracle_checkpoints import describe, row_major_bytes


def contiguous_strides(shape):
    strides, stride = [], 1
    for size in reversed(shape):
        strides.insert(0, stride)
        stride *= max(size, 1)
    return strides


def check(path, want):
    problems = []
    if path.suffix == ".safetensors":
        loaded = safetensors.torch.load_file(path)
        if list(loaded) != want["keys"]:
            problems.append(f"keys {list(loaded)} != {want['keys']}")
    else:
        loaded = torch.load(path, weights_only=True)
        if type(loaded) is not collections.OrderedDict:
            problems.append(f"loads as {type(loaded).__name__}, not OrderedDict")
        if list(loaded) != want["keys"]:
            problems.append(f"keys {list(loaded)} != {want['keys']}")
        metadata = describe(loaded)["metadata"]
        if metadata != want["metadata"]:
            problems.append(f"_metadata {metadata} != {want['metadata']}")
        elif metadata is not None and list(metadata) != list(want["metadata"]):
            problems.append(f"_metadata order {list(metadata)} != {list(want['metadata'])}")
    for key, t in loaded.items():
        exp = want["tensors"].get(key)
        if exp is None:
            continue
        got = {
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "requires_grad": t.requires_grad,
            "hex": row_major_bytes(t).hex(),
        }
        wanted = dict(exp, stride=contiguous_strides(exp["shape"]))
        if path.suffix == ".safetensors":
            wanted["requires_grad"] = False
        for field, value in got.items():
            if value != wanted[field]:
                problems.append(f"{key}: {field} {value} != {wanted[field]}")
    return problems


def main(argv):
    expected = json.loads(pathlib.Path(argv[1]).read_text())
    failed = False
    for pair in argv[2:]:
        file, name = pair.split("=", 1)
        problems = check(pathlib.Path(file), expected[name])
        for problem in problems:
            print(f"{file}: {problem}")
        failed |= bool(problems)
        print(f"{file}: {'MISMATCH' if problems else 'ok'} against {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
