# SPDX-License-Identifier: BSD-3-Clause
"""The Python half of the probe_compare example: which module of a C++ port computes otherwise?

usage: probe_compare.py python DIR                 writes the model's weights (DIR/model.pt), its
                                                   input (DIR/input.pt) and msprobe's config
                                                   (DIR/config.json), then runs msprobe's own
                                                   dump of one training step: DIR/dump_python
       probe_compare.py compare CPP PYTHON [--expect ENTRY]
                                                   runs `msprobe compare` on step 0 of the C++
                                                   dump CPP against the Python dump PYTHON and
                                                   prints its verdict: every row matched, then
                                                   "all rows pass" or the first module whose row
                                                   does not pass; fails on a row compare could
                                                   not match, and, with --expect, unless ENTRY
                                                   (Module.act.GELU.forward.0) is that module

probe_compare.cpp is the C++ port of `Net` below; it dumps the same step with
modhooks::probe::PrecisionDebugger. Exit status 77 where msprobe (PyPI mindstudio-probe) is not
installed.
"""
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys

import torch
from torch import nn

SKIP = 77

# msprobe's config.json: task statistics with md5 CRCs, so that a module whose output differs
# by one bit is marked, at level L0 (modules). The C++ run reads the same file.
CONFIG = {"task": "statistics", "dump_path": "./dump_python", "rank": [], "step": [],
          "level": "L0", "async_dump": False,
          "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "md5"}}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.norm(self.act(self.fc1(x))))


def python_run(d):
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(6, 8)
    torch.save(model.state_dict(), d / "model.pt")
    torch.save({"x": x}, d / "input.pt")
    shutil.rmtree(d / "dump_python", ignore_errors=True)  # a run's proc<pid> folder alone
    config = dict(CONFIG, dump_path=str(d / "dump_python"))
    (d / "config.json").write_text(json.dumps(config, indent=1))
    try:
        from msprobe.pytorch import PrecisionDebugger
    except ImportError:
        # The C++ run needs no msprobe: it still dumps, from what is written above.
        print("probe_compare: msprobe (mindstudio-probe) is not installed; skipped")
        return SKIP

    debugger = PrecisionDebugger(config_path=str(d / "config.json"))
    debugger.start(model)
    loss = model(x).pow(2).mean()
    loss.backward()
    debugger.stop()
    debugger.step()
    print(f"python: loss {loss.item():.6f}, msprobe's dump in {d / 'dump_python'}")
    return 0


def dump_json(dump_path):
    """step0's dump.json: compare is given files, so that proc<pid> folders need not pair."""
    found = glob.glob(os.path.join(dump_path, "step0", "*", "dump.json"))
    if len(found) != 1:
        sys.exit(f"probe_compare: no single step0/*/dump.json under {dump_path}")
    return found[0]


def compare(cpp, python, expect):
    try:
        import msprobe  # noqa: F401  (its command runs below; pandas reads its table)
        import pandas
    except ImportError:
        print("probe_compare: msprobe (mindstudio-probe) is not installed; skipped")
        return SKIP
    out = pathlib.Path(cpp).parent / ("compare_" + pathlib.Path(cpp).name)
    for old in glob.glob(str(out / "compare_result_*")):
        os.remove(old)
    msprobe = pathlib.Path(sys.executable).parent / "msprobe"
    command = [str(msprobe), "compare", "-tp", dump_json(cpp), "-gp", dump_json(python),
               "-o", str(out)]
    print("$ " + " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True)
    results = glob.glob(str(out / "compare_result_*.csv"))
    if done.returncode != 0 or len(results) != 1:
        print(done.stdout + done.stderr)
        print("probe_compare: msprobe compare wrote no result")
        return 1
    # keep_default_na: the unmatched rows' "N/A" stays a string.
    table = pandas.read_csv(results[0], keep_default_na=False, dtype=str)
    unmatched = table[table["Bench Name"] == "N/A"]
    if len(table) == 0 or len(unmatched):
        # compare passes rows it could not match: such a dump compares nothing there.
        for name in unmatched["NPU Name"]:
            print(f"no match in the Python dump: {name}")
        print(f"probe_compare: {len(unmatched)} of {len(table)} rows not matched")
        return 1
    print(f"{len(table)} rows, every one matched a row of the Python dump")
    differing = table[table["Result"] != "pass"]
    if len(differing) == 0:
        print("all rows pass")
        first = None
    else:
        row = differing.iloc[0]
        # The row's entry: its name less ".input.0", ".output.0", ".parameters.weight", ...
        first = next(e for e in (row["NPU Name"].rsplit(".", n)[0] for n in (1, 2, 3))
                     if e.rsplit(".", 2)[1] in ("forward", "backward", "parameters_grad"))
        print(f"first module that differs: {first} ({row['NPU Name']}: {row['Result']}, "
              f"{row['Err_message']})")
        print(f"{len(table) - len(differing)} rows pass, {len(differing)} do not")
    if expect is not None and first != expect:
        print(f"probe_compare: expected {expect} to differ first")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "python":
        sys.exit(python_run(pathlib.Path(sys.argv[2])))
    if len(sys.argv) in (4, 6) and sys.argv[1] == "compare":
        expect = sys.argv[5] if len(sys.argv) == 6 and sys.argv[4] == "--expect" else None
        if len(sys.argv) == 6 and expect is None:
            sys.exit(__doc__)
        sys.exit(compare(sys.argv[2], sys.argv[3], expect))
    sys.exit(__doc__)
