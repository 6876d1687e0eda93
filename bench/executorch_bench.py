# SPDX-License-Identifier: BSD-3-Clause
"""Writes the ExecuTorch programs executorch_bench times, into <dir>: each model written without
points (the baseline) and with points (modhooks.export with backend="executorch", then
modhooks.export.to_executorch), and its input; with "_xnnpack", lowered with the XNNPACK
partitioner, where each point splits a delegated partition.

  pte_resnet18: torchvision's resnet18 (10 classes, 2x3x64x64): plain, its 8 BasicBlocks; with
                ExecuTorch's own kernels and with XNNPACK;
  pte_chain:    256 Tanh modules on a 1x8 input: plain, every Tanh (256 points), where the
                firings are most of what a run does.
"""
import pathlib
import sys

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

import modhooks.export as mhx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from aoti_bench import resnet18_blocks  # noqa: E402


def write(folder: pathlib.Path, name: str, model, inputs, variants, xnnpack=False) -> None:
    model.eval()
    torch.save(list(inputs), folder / f"{name}.inputs.pt")
    for suffix, partitioners in [("", None)] + ([("_xnnpack", XnnpackPartitioner)] if xnnpack else []):
        plain = mhx.export(model, tuple(inputs), points=[], backend="executorch")
        mhx.to_executorch(plain, str(folder / f"{name}.plain{suffix}.pte"),
                          partitioners=[partitioners()] if partitioners else None)
        for tag, points in variants.items():
            ep = mhx.export(model, tuple(inputs), points=points, backend="executorch")
            mhx.to_executorch(ep, str(folder / f"{name}.{tag}{suffix}.pte"),
                              partitioners=[partitioners()] if partitioners else None)
        print(f"{name}{suffix}: written", flush=True)


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    resnet, blocks = resnet18_blocks()
    write(folder, "pte_resnet18", resnet, [torch.randn(2, 3, 64, 64)], {"blocks": blocks},
          xnnpack=True)
    chain = torch.nn.Sequential(*[torch.nn.Tanh() for _ in range(256)])
    tanhs = [n for n, m in chain.named_modules() if isinstance(m, torch.nn.Tanh)]
    write(folder, "pte_chain", chain, [torch.randn(1, 8)], {"tanhs": tanhs})


if __name__ == "__main__":
    main()
