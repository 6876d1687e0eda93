# SPDX-License-Identifier: BSD-3-Clause
"""Writes the packages aoti_bench times, into <dir>: each model compiled without points (the
baseline) and with points (modhooks.export), and its input; prints how many fused kernels each
package has, which is what a point can cost beside its call (a point splits a fusion).

  resnet18: torchvision's resnet18 (10 classes, 2x3x64x64): plain, its 8 BasicBlocks, every
            submodule;
  bert:     a 4-layer BERT from a small config (hidden 128, sequence 64): plain, each layer;
  tiny:     16 Linear(32, 32) + ReLU layers on a 8x32 input: plain, every Linear (16 points),
            where a point's own cost is not lost in the model's;
  chain:    256 Tanh modules on a 1x8 input: plain, every Tanh (256 points), where the firings
            are most of what a run does, so that their cost stands out of the run's noise.
"""
import pathlib
import re
import sys
import zipfile

import torch
import torchvision
import transformers

import modhooks.export as mhx


def kernels(path: pathlib.Path) -> int:
    with zipfile.ZipFile(path) as z:
        source = "".join(z.read(n).decode() for n in z.namelist() if n.endswith(".kernel.cpp"))
    return len(re.findall(r'extern "C"\s+void\s+cpp_fused_\w+\(', source))


def write(folder: pathlib.Path, name: str, model, inputs, variants) -> None:
    model.eval()
    torch.save(list(inputs), folder / f"{name}.inputs.pt")
    with torch.no_grad():
        plain = torch.export.export(model, tuple(inputs))
    torch._inductor.aoti_compile_and_package(plain, package_path=str(folder / f"{name}.plain.pt2"))
    counts = {"plain": kernels(folder / f"{name}.plain.pt2")}
    for tag, points in variants.items():
        points, at_inputs = points if isinstance(points, tuple) else (points, None)
        ep = mhx.export(model, tuple(inputs), points=points, inputs=at_inputs)
        path = folder / f"{name}.{tag}.pt2"
        mhx.aoti_compile_and_package(ep, package_path=str(path))
        counts[f"{tag} ({len(mhx.point_table(ep))} points)"] = kernels(path)
    print(f"{name}: fused kernels " + ", ".join(f"{k}: {v}" for k, v in counts.items()), flush=True)


def resnet18_blocks() -> tuple[torch.nn.Module, list[str]]:
    """torchvision's resnet18 (10 classes, seeded weights) and the names of its 8 BasicBlocks."""
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=10)
    return resnet, [n for n, m in resnet.named_modules()
                    if isinstance(m, torchvision.models.resnet.BasicBlock)]


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    resnet, blocks = resnet18_blocks()
    write(folder, "resnet18", resnet, [torch.randn(2, 3, 64, 64)], {"blocks": blocks, "all": None})

    config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=512,
                                     max_position_embeddings=128)
    bert = transformers.BertModel(config)
    layers = [f"encoder.layer.{i}" for i in range(4)]
    write(folder, "bert", bert, [torch.randint(0, 1000, (2, 64))], {"layers": layers})

    tiny = torch.nn.Sequential(*[m for _ in range(16) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())])
    linears = [n for n, m in tiny.named_modules() if isinstance(m, torch.nn.Linear)]
    write(folder, "tiny", tiny, [torch.randn(8, 32)],
          {"linears": linears, "linears_inputs": (linears, linears)})

    chain = torch.nn.Sequential(*[torch.nn.Tanh() for _ in range(256)])
    tanhs = [n for n, m in chain.named_modules() if isinstance(m, torch.nn.Tanh)]
    write(folder, "chain", chain, [torch.randn(1, 8)], {"tanhs": tanhs})


if __name__ == "__main__":
    main()
