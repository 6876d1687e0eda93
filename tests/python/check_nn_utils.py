# SPDX-License-Identifier: BSD-3-Clause
"""Loads a state dict that C++ saved from a scenario's module (nn_utils_scenarios.py) into the
same module in Python, with the same utilities applied, and checks it against the oracle: the
values Python trained to and the eval-mode output, within <tolerance> times the larger of 1 and
the largest magnitude expected (the C++ test passes its own).

usage: check_nn_utils.py <state dict saved by C++> <scenario> <oracle folder> <tolerance>
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import nn_utils_scenarios as sc  # noqa: E402


def near(actual, expected, tolerance):
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    return actual.shape == expected.shape and bool(
        ((actual.double() - expected.double()).abs() <= tolerance * scale).all())


def main(path, name, oracle_dir, tolerance):
    tolerance = float(tolerance)
    expected = torch.load(pathlib.Path(oracle_dir) / f"{name}.pt")
    module, x = sc.build(name)
    sc.apply(name, module)
    saved = torch.load(path)
    module.load_state_dict(saved)  # strict: the keys must be Python's
    problems = []
    if name.startswith("sn_"):
        # spectral_norm's version, nested in the metadata as Python writes it.
        version = saved._metadata[""].get("spectral_norm", {}).get("weight.version")
        if version != 1:
            problems.append(f"metadata {saved._metadata['']} lacks spectral_norm's version 1")
    for key, value in module.state_dict().items():
        if not near(value, expected["final." + key], tolerance):
            problems.append(f"{key} differs from Python's")
    module.eval()
    with torch.no_grad():
        if not near(module(x), expected["eval"], tolerance):
            problems.append("the eval-mode output differs from Python's")
    for problem in problems:
        print(f"{name}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
