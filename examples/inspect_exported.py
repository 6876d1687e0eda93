# SPDX-License-Identifier: BSD-3-Clause
"""Writes the Python side of the inspect_exported example into <dir> (default: current folder).

resnet18.pt2: torchvision's resnet18 (random weights, 10 classes), exported with
modhooks.export with a hook point on each of its 8 BasicBlocks and compiled with AOTInductor,
the way a model reaches C++ now that TorchScript is deprecated.
resnet18_expected.pt: an input batch and what Python's eager hooks saw on the same model with
the same weights: the mean and standard deviation of each block's output, the logits, and the
logits when a forward hook halves the output of `layer3.0`.
"""
import pathlib
import sys

import torch
import torchvision

import modhooks.export as mhx


def eager_record(model: torch.nn.Module, x: torch.Tensor, blocks: list[str]) -> dict:
    """What Python's eager hooks see on `model`: the input, each block's output mean and standard
    deviation, the logits, and the logits with `layer3.0`'s output halved by a forward hook."""
    expected = {"input": x}
    modules = dict(model.named_modules())
    handles = []
    for name in blocks:
        def stats(module, args, output, name=name):
            expected[f"{name}.mean"] = output.mean()
            expected[f"{name}.std"] = output.std()

        handles.append(modules[name].register_forward_hook(stats))
    with torch.no_grad():
        expected["logits"] = model(x)
    for h in handles:
        h.remove()
    h = modules["layer3.0"].register_forward_hook(lambda m, a, o: o * 0.5)
    with torch.no_grad():
        expected["logits_halved"] = model(x)
    h.remove()
    return expected


def resnet18_blocks() -> tuple[torch.nn.Module, torch.Tensor, list[str]]:
    """torchvision's resnet18 (random weights, seeded), an input batch, and its 8 BasicBlocks."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    return model, x, [n for n, m in model.named_modules()
                      if isinstance(m, torchvision.models.resnet.BasicBlock)]


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    model, x, blocks = resnet18_blocks()

    ep = mhx.export(model, (x,), points=blocks)
    mhx.aoti_compile_and_package(ep, package_path=str(out / "resnet18.pt2"))

    torch.save(eager_record(model, x, blocks), out / "resnet18_expected.pt")
    print(f"wrote {out / 'resnet18.pt2'} ({len(blocks)} points) and resnet18_expected.pt")


if __name__ == "__main__":
    main()
