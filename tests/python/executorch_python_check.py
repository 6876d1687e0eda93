# SPDX-License-Identifier: BSD-3-Clause
"""The export side of ExecuTorch programs, in Python: what export and to_executorch refuse, and
what they write (run by ctest as executorch_python)."""
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "python"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import modhooks.export as mhx  # noqa: E402
from aoti_packages import Branchy  # noqa: E402


def expect_raises(kind, text, call) -> None:
    try:
        call()
    except kind as e:
        assert text in str(e), f"{kind.__name__} without {text!r}: {e}"
        return
    raise AssertionError(f"no {kind.__name__} ({text!r})")


def main() -> None:
    torch.manual_seed(0)
    model = Branchy().eval()
    x = torch.randn(4, 8)
    expect_raises(ValueError, "backend 'tflite' is not one of",
                  lambda: mhx.export(model, (x,), backend="tflite"))
    aoti_ep = mhx.export(model, (x,))
    et_ep = mhx.export(model, (x,), inputs=["a"], backend="executorch")
    with tempfile.TemporaryDirectory() as folder:
        path = str(pathlib.Path(folder) / "net.pte")
        expect_raises(ValueError, "backend='aoti'", lambda: mhx.to_executorch(aoti_ep, path))
        expect_raises(ValueError, "backend='executorch'",
                      lambda: mhx.aoti_compile_and_package(et_ep, package_path=path + ".pt2"))
        mhx.to_executorch(et_ep, path)
        # What the C++ runtime reads: the ABI and the point table as constant methods.
        program = Runtime.get().load_program(path)
        abi = program.load_method(mhx.EXECUTORCH_ABI_METHOD).execute([])
        assert abi == [mhx.ABI], abi
        table = program.load_method(mhx.EXECUTORCH_POINTS_METHOD).execute([])[0]
        names = [p["name"] for p in mhx.point_table(et_ep)]
        assert names == ["id", "a", "relu", "b", "two", "flat", "head"], names
        for name in names:
            assert f'"name":"{name}"' in table, (name, table)
    print("executorch_python_check: export and to_executorch refuse and write as documented")


if __name__ == "__main__":
    main()
