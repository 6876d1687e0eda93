# SPDX-License-Identifier: BSD-3-Clause
"""Writes the Python side of the inspect_executorch example into <dir> (default: current folder).

resnet18.pte: torchvision's resnet18 (random weights, 10 classes), exported with modhooks.export
(backend="executorch") with a hook point on each of its 8 BasicBlocks, lowered with the XNNPACK
partitioner and written by modhooks.export.to_executorch: the way a model reaches a phone.
resnet18_expected.pt: what Python's eager hooks saw on the same weights, as inspect_exported.py
records it (each block's output mean and standard deviation, the logits, and the logits with
`layer3.0` halved).
"""
import pathlib
import sys

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

import modhooks.export as mhx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from inspect_exported import eager_record, resnet18_blocks  # noqa: E402


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    model, x, blocks = resnet18_blocks()

    ep = mhx.export(model, (x,), points=blocks, backend="executorch")
    mhx.to_executorch(ep, str(out / "resnet18.pte"), partitioners=[XnnpackPartitioner()])
    torch.save(eager_record(model, x, blocks), out / "resnet18_expected.pt")
    print(f"wrote {out / 'resnet18.pte'} ({len(blocks)} points) and resnet18_expected.pt")


if __name__ == "__main__":
    main()
