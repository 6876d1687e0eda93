# SPDX-License-Identifier: BSD-3-Clause
"""Writes the ExecuTorch programs the executorch tests load, and what Python eager does on the
same weights: the oracle of tests/executorch_test.cpp (and of the tests in point_tests.h that it
runs on programs).

For each case, into the folder given as the first argument, as aoti_packages.py writes for
packages: <case>.pte (exported with modhooks.export(..., backend="executorch") and written by
modhooks.export.to_executorch), <case>.plain.pte for some (the same model with no points), and
<case>.json and <case>.safetensors (the point table, eager's firings, outputs and replaced
outputs), and call_sequence.pte with Python's answers for tests/call_sequence_test.cpp
(call_sequence.oracle.json), as aoti_packages.py writes them. Cases ending in _xnnpack are
lowered with the XNNPACK partitioner, their plain program too. Beside them, programs that must be refused: other_abi.pte, truncated.pte, not_a_program.pte.

The folder is reused while this script, aoti_packages.py, oracle_call_sequence.py, the modhooks
Python package, torch and executorch stay the same (a stamp names their hash).
"""

from __future__ import annotations

import hashlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(HERE))  # aoti_packages

import executorch.version  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower  # noqa: E402

import modhooks.export as mhx  # noqa: E402
from aoti_packages import Branchy, build_once, record_case, write_shared_cases  # noqa: E402


def write_program(folder: pathlib.Path, case: str, model: nn.Module, inputs, points=None,
                  inputs_at=None, replace=None, plain=False, strict=False, dynamic_shapes=None,
                  extra_inputs=()) -> None:
    model.eval()
    partitioners = (lambda: [XnnpackPartitioner()]) if case.endswith("_xnnpack") else (lambda: None)
    ep = mhx.export(model, tuple(inputs), points=points, inputs=inputs_at, strict=strict,
                    dynamic_shapes=dynamic_shapes, backend="executorch")
    mhx.to_executorch(ep, str(folder / f"{case}.pte"), partitioners=partitioners())
    if plain:
        plain_ep = mhx.export(model, tuple(inputs), points=[], strict=strict, backend="executorch")
        mhx.to_executorch(plain_ep, str(folder / f"{case}.plain.pte"), partitioners=partitioners())
    record_case(folder, case, model, inputs, mhx.point_table(ep), replace, plain, extra_inputs)


def build(folder: pathlib.Path) -> None:
    import torchvision

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    write_program(folder, "branchy", Branchy(), [x], inputs_at=["a", "two"], replace="a",
                  plain=True)

    # A batch size the program takes from 2 to 64: ExecuTorch plans the upper bound, and each
    # point's buffer is resized to the run's sizes.
    batch = torch.export.Dim("batch", min=2, max=64)
    write_program(folder, "dynamic", Branchy(), [torch.randn(4, 8)], inputs_at=["a"],
                  replace="two", dynamic_shapes={"x": {0: batch}},
                  extra_inputs=[[torch.randn(3, 8)], [torch.randn(7, 8)]])

    resnet = torchvision.models.resnet18(num_classes=10)
    image = torch.randn(2, 3, 64, 64)
    write_program(folder, "resnet18", resnet, [image], replace="layer2.0.bn1")
    blocks = [n for n, m in resnet.named_modules() if type(m).__name__ == "BasicBlock"]
    for case in ("resnet18_blocks", "resnet18_blocks_xnnpack"):
        write_program(folder, case, resnet, [image], points=blocks, replace="layer3.1", plain=True)

    mobilenet = torchvision.models.mobilenet_v3_small(num_classes=10)
    write_program(folder, "mobilenet_v3_small", mobilenet, [image], replace="features.3")

    write_shared_cases(folder, write_program)

    # Programs to refuse: another modhooks ABI, a program cut short, a file that is no program.
    ep = mhx.export(Branchy().eval(), (x,), backend="executorch")
    edge = to_edge_transform_and_lower(
        ep, compile_config=EdgeCompileConfig(_check_ir_validity=False),
        constant_methods={mhx.EXECUTORCH_ABI_METHOD: "9.9", mhx.EXECUTORCH_POINTS_METHOD: "[]"})
    (folder / "other_abi.pte").write_bytes(edge.to_executorch().buffer)
    whole = (folder / "branchy.pte").read_bytes()
    (folder / "truncated.pte").write_bytes(whole[: len(whole) // 2])
    (folder / "not_a_program.pte").write_bytes((folder / "branchy.json").read_bytes())


def stamp() -> str:
    digest = hashlib.sha256((torch.__version__ + executorch.version.__version__).encode())
    for path in ([pathlib.Path(__file__), HERE / "aoti_packages.py",
                  HERE / "oracle_call_sequence.py"]
                 + sorted((ROOT / "python" / "modhooks").glob("*.py"))):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    build_once(folder, stamp(), build)


if __name__ == "__main__":
    main()
