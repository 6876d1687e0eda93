# SPDX-License-Identifier: BSD-3-Clause
"""Writes every file the C++ tests compare against: runs main(out_dir) of each oracle_*.py here.

Python torch is the oracle: each oracle module runs a scenario in Python and writes what it saw
(hook order, gradients, checkpoint files) under $MODHOOKS_FIXTURES for the C++ side to match.
"""
import importlib
import os
import pathlib
import sys

here = pathlib.Path(__file__).resolve().parent
out = pathlib.Path(os.environ.get("MODHOOKS_FIXTURES", "fixtures"))
out.mkdir(parents=True, exist_ok=True)
sys.path.insert(0, str(here))
for path in sorted(here.glob("oracle_*.py")):
    importlib.import_module(path.stem).main(out)
    print(f"{path.stem}: wrote fixtures to {out}")
