# SPDX-License-Identifier: BSD-3-Clause
"""The Python side of hook points: which operator modhooks.export puts where, its errors, and the
packages tests/python/aoti_packages.py wrote run from Python (modhooks.runtime) against eager.

Usage: aoti_python_check.py <packages folder>. Exits non-zero on the first failed check.
"""

from __future__ import annotations

import json
import pathlib
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import modhooks  # noqa: E402
import modhooks.export as mhx  # noqa: E402
from aoti_packages import Branchy, OwnTensors, doubled, tensors  # noqa: E402
from modhooks.runtime import Package  # noqa: E402


def ops_by_point(ep) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("modhooks."):
            found.setdefault(node.args[-1], set()).add(node.target.__name__.split(".")[0])
    return found


def check_operator_choice() -> None:
    torch.manual_seed(0)
    ep = mhx.export(Branchy().eval(), (torch.randn(4, 8),), inputs=["a"])
    ops = ops_by_point(ep)
    # Identity returns its input and Flatten a view: writing in place would write into them.
    assert ops["id"] == {"output_point"}, ops
    assert ops["flat"] == {"output_point"}, ops
    for fresh in ("b", "relu", "two", "head"):
        assert ops[fresh] == {"output_point_"}, (fresh, ops)
    assert ops["a"] == {"input_point", "output_point_"}, ops
    table = {p["name"]: p for p in mhx.point_table(ep)}
    assert table["two"]["single"] is False and table["a"]["inputs"] is True, table
    assert [p["name"] for p in mhx.point_table(ep)] == ["id", "a", "relu", "b", "two", "flat", "head"]
    # Strict export traces the hooks with TorchDynamo, which drops what they record: the table is
    # recorded in eager, and says what non-strict export's says.
    strict = mhx.export(Branchy().eval(), (torch.randn(4, 8),), inputs=["a"], strict=True)
    assert mhx.point_table(strict) == mhx.point_table(ep), mhx.point_table(strict)


def check_own_tensors() -> None:
    """A submodule that returns its parameter, buffer, a view of the buffer or a constant gets
    the copying operator in strict and non-strict export; non-strict export traces with fake
    tensors swapped into the model, where the real tensors' ids never match."""
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    for strict in (False, True):
        ops = ops_by_point(mhx.export(OwnTensors().eval(), (x,), strict=strict))
        for held in ("pos", "cache", "head", "scale"):
            assert ops[held] == {"output_point"}, (strict, held, ops)
        assert ops["lin"] == {"output_point_"}, (strict, ops)
    # The traced graph is read too: had the in-place operator been chosen for a module that
    # returns its parameter, export raises.
    chosen = mhx._Placer.owned
    mhx._Placer.owned = lambda self: set()
    try:
        mhx.export(OwnTensors().eval(), (x,), points=["pos"])
    except RuntimeError as e:
        assert "'pos' would write into 'p_pos_weight'" in str(e), e
    else:
        raise AssertionError("an in-place point on a parameter must raise")
    finally:
        mhx._Placer.owned = chosen


def check_selection() -> None:
    model = Branchy().eval()
    x = torch.randn(4, 8)
    ep = mhx.export(model, (x,), points=lambda name, m: isinstance(m, torch.nn.Linear))
    assert [p["name"] for p in mhx.point_table(ep)] == ["a", "b", "head"]
    ep = mhx.export(model, (x,), points=[])
    assert mhx.point_table(ep) == [] and not ops_by_point(ep)
    try:
        mhx.export(model, (x,), points=["c"])
    except KeyError as e:
        assert "'c' is not a submodule" in str(e), e
    else:
        raise AssertionError("an unknown module name must raise KeyError")
    # No hooks are left on the model.
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def check_python_runtime(folder: pathlib.Path) -> None:
    for case in ("branchy", "own_tensors", "own_tensors_strict"):
        check_runtime_against_eager(folder, case)
    record = load_file(str(folder / "branchy.safetensors"))
    check_edits_in_place(folder, record["input.0"])
    try:
        Package(str(folder / "other_abi.pt2"))
    except RuntimeError as e:
        assert f"ABI 9.9; this is {modhooks.ABI}" in str(e), e
    else:
        raise AssertionError("a package of another ABI must be refused")


def check_runtime_against_eager(folder: pathlib.Path, case: str) -> None:
    """A case's package run from Python: every point fires in eager's order with eager's
    tensors, the case's replacement changes the outputs as in eager, and, once its hook is
    removed, the outputs are bitwise those of the package exported without points."""
    info = json.loads((folder / f"{case}.json").read_text())
    record = load_file(str(folder / f"{case}.safetensors"))
    inputs = [record[f"input.{i}"] for i in range(info["runs"][0]["inputs"])]
    package = Package(str(folder / f"{case}.pt2"))
    assert package.points == [p["name"] for p in info["points"]], case
    fired = []
    handles = [package.register_forward_hook(n, lambda n, a, o: fired.append((n, o)))
               for n in package.points]
    out = package(*inputs)
    assert [n for n, _ in fired] == info["runs"][0]["order"], (case, fired)
    for i, (_, o) in enumerate(fired):
        got = o if isinstance(o, tuple) else (o,)
        for k, t in enumerate(got):
            assert torch.allclose(t, record[f"fire.{i}.{k}"], atol=1e-4), (case, i, k)
    for h in handles:
        h.remove()
    handle = package.register_forward_hook(info["replace"], lambda n, a, o: doubled(o))
    out = tensors(package(*inputs))
    assert len(out) == info["runs"][0]["outputs"], (case, len(out))
    for j, t in enumerate(out):
        assert torch.allclose(t, record[f"replaced.{j}"], atol=1e-4), (case, j)
    handle.remove()
    if info["plain"]:
        plain = torch._inductor.aoti_load_package(str(folder / f"{case}.plain.pt2"))
        for got, want in zip(tensors(package(*inputs)), tensors(plain(*inputs)), strict=True):
            assert torch.equal(got, want), case


def check_edits_in_place(folder: pathlib.Path, x: torch.Tensor) -> None:
    """As in C++ (tests/aoti_test.cpp): an edit in place is what the caller receives, as the same
    replacement is, at an in-place point, a copying point and an input point, and never reaches the
    caller's input; a replacement of other sizes raises ValueError."""
    def tripled(value):
        return tuple(t * 3 for t in value) if isinstance(value, tuple) else value * 3

    def edit(value):
        for t in value if isinstance(value, tuple) else (value,):
            t.mul_(3)

    def run(package):
        given = x.clone()
        out = package(given)
        assert torch.equal(given, x), "a hook's edit reached the caller's input"
        return out

    for point in ("two", "id", "a"):
        results = []
        for hook in (edit, tripled):
            package = Package(str(folder / "branchy.pt2"))
            if point == "a":
                package.register_forward_pre_hook(point, lambda n, args, hook=hook: hook(args))
            else:
                package.register_forward_hook(point, lambda n, args, out, hook=hook: hook(out))
            results.append(run(package))
        for edited, replaced in zip(*results):
            assert torch.equal(edited, replaced), point
    def expect_refused(hook, error: type, text: str) -> None:
        package = Package(str(folder / "branchy.pt2"))
        package.register_forward_hook("id", hook)
        try:
            package(x.clone())
        except error as e:
            assert text in str(e), e
        else:
            raise AssertionError(f"{text!r}: the run must raise {error.__name__}")

    expect_refused(lambda n, args, out: out[:2], ValueError,
                   "replaced output tensor 0 with torch.float32[2, 8]")
    expect_refused(lambda n, args, out: (out,), TypeError,
                   "returned a tuple as its output; the compiled graph holds a tensor")


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    check_operator_choice()
    check_own_tensors()
    check_selection()
    check_python_runtime(folder)
    print("aoti_python_check: all checks passed")


if __name__ == "__main__":
    main()
