# SPDX-License-Identifier: BSD-3-Clause
"""A training step with msprobe's statistics dump: modhooks::probe in C++ against msprobe in Python.

  probe_step_bench.py --binary build/bench/probe_step_bench [--dir DIR] [--launches 3]
                      [--steps 3] [--rounds 8] [--instrument] [--json FILE]
  probe_step_bench.py prepare DIR         the scripted model and config.json only
  probe_step_bench.py python DIR          one Python launch (prints one JSON line)

`prepare` scripts torchvision's resnet18 (random weights; DIR/resnet18.pt) and writes msprobe's
config.json (task statistics, level L0, summary_mode statistics). Then the launches alternate, the
order flipping each launch pair: the C++ binary (bench/probe_step_bench.cpp) times the step of the
scripted model with modhooks::probe's PrecisionDebugger against the same step without it; this
file's `python` mode times the step of the eager model with msprobe's PrecisionDebugger against
the same step without it. Both: batch 8x3x64x64, cross-entropy over 1000 classes, SGD, one
intra-op thread, the debugger started, stopped and stepped around every step, the plain step run
by a second copy of the model that no debugger touches, alternating blocks in one process, the
median over rounds. Each side dumps every step into its own folder under DIR (dump_cpp,
dump_python: step<N>/proc<pid>/dump.json, construct.json, stack.json). Prints each launch's
figures, then the median over launches: the plain step, the step with the dump and what the dump
adds, for each language, and (what modhooks adds) / (what msprobe adds) against the goal 0.2;
with --json, those medians into FILE too (bench/perf_page.py reads them).
"""
import argparse
import copy
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
import torchvision

GOAL = 0.2  # modhooks adds at most a fifth of what msprobe adds
CONFIG = {"task": "statistics", "dump_path": "./dump_python", "rank": [], "step": [],
          "level": "L0", "async_dump": False,
          "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                         "summary_mode": "statistics"}}
BATCH = (8, 3, 64, 64)
def resnet18():
    """torchvision's resnet18 as it is (its ReLU(inplace=True) and `out += identity` included),
    random weights."""
    return torchvision.models.resnet18(weights=None)


def prepare(d):
    d = pathlib.Path(d)
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = resnet18()
    torch.jit.script(model).save(str(d / "resnet18.pt"))
    torch.save(model.state_dict(), d / "resnet18_state.pt")
    config = dict(CONFIG, dump_path=str(d / "dump_python"))
    (d / "config.json").write_text(json.dumps(config, indent=1))


def timed(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) * 1e3 / steps


def python_launch(d, steps, rounds):
    """bench/probe_step_bench.cpp's main, in Python, with msprobe's debugger."""
    from msprobe.pytorch import PrecisionDebugger

    d = pathlib.Path(d)
    torch.set_num_threads(1)
    # conv1's input needs no gradient: the full backward hook's warning, as in C++ (once).
    warnings.filterwarnings("once", message="Full backward hook is firing")
    plain = resnet18()
    plain.load_state_dict(torch.load(d / "resnet18_state.pt", weights_only=True))
    probed = copy.deepcopy(plain)
    plain.train()
    probed.train()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
    probed_opt = torch.optim.SGD(probed.parameters(), lr=0.01)
    config = json.loads((d / "config.json").read_text())
    debugger = PrecisionDebugger(config_path=str(d / "config.json"),
                                 dump_path=config["dump_path"])
    torch.manual_seed(0)
    x, y = torch.randn(*BATCH), torch.randint(0, 1000, (BATCH[0],))

    def plain_step():
        F.cross_entropy(plain(x), y).backward()
        plain_opt.step()
        plain_opt.zero_grad()

    def probed_step():
        debugger.start(probed)
        F.cross_entropy(probed(x), y).backward()
        debugger.stop()
        debugger.step()
        probed_opt.step()
        probed_opt.zero_grad()

    plain_ms, probed_ms = [], []
    for rnd in range(-1, rounds):
        if rnd % 2 == 0:
            p = timed(plain_step, steps)
            m = timed(probed_step, steps)
        else:
            m = timed(probed_step, steps)
            p = timed(plain_step, steps)
        if rnd >= 0:
            plain_ms.append(p)
            probed_ms.append(m)
    print(json.dumps({"impl": "msprobe Python", "steps": steps, "rounds": rounds,
                      "plain_ms": statistics.median(plain_ms),
                      "dump_ms": statistics.median(probed_ms)}), flush=True)


def launch(cmd):
    """Runs one launch and returns its JSON line (msprobe logs to stdout too)."""
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, timeout=600).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith('{"impl"')]
    if len(lines) != 1:
        sys.exit(f"no figures from {cmd}:\n{out}")
    return lines[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", nargs="?", choices=["prepare", "python"])
    ap.add_argument("cmd_dir", nargs="?")
    ap.add_argument("--binary")
    ap.add_argument("--dir", default="/tmp/probe_step_bench")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--instrument", action="store_true")
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    if a.command == "prepare":
        prepare(a.cmd_dir or a.dir)
        return
    if a.command == "python":
        python_launch(a.cmd_dir or a.dir, a.steps, a.rounds)
        return
    if not a.binary:
        ap.error("--binary is needed")
    d = pathlib.Path(a.dir)
    began = time.perf_counter()
    prepare(d)
    args = [str(a.steps), str(a.rounds)]
    cpp = [a.binary, str(d), *args] + (["--instrument"] if a.instrument else [])
    cpp_impl = "modhooks C++" + (" instrumented" if a.instrument else "")
    python = [sys.executable, os.path.abspath(__file__), "python", str(d), "--steps", args[0],
              "--rounds", args[1]]
    results = {cpp_impl: [], "msprobe Python": []}
    print(f"torch {torch.__version__}, resnet18 {'x'.join(map(str, BATCH))}, one thread, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, {a.launches} launches "
          f"per language of {a.rounds} rounds x {a.steps} steps")
    for i in range(a.launches):
        for cmd in (cpp, python) if i % 2 == 0 else (python, cpp):
            for sub in ("dump_cpp", "dump_python"):  # one launch's step folders at a time
                shutil.rmtree(d / sub, ignore_errors=True)
            r = launch(cmd)
            results[r["impl"]].append(r)
            print(f"  launch {i}: {r['impl']:25}  plain {r['plain_ms']:8.2f} ms  "
                  f"dump {r['dump_ms']:8.2f} ms", flush=True)
    print("median over launches, ms per step (same processes, alternating blocks):")
    adds, medians = {}, {}
    for impl, rs in results.items():
        plain = statistics.median(r["plain_ms"] for r in rs)
        dump = statistics.median(r["dump_ms"] for r in rs)
        adds[impl] = dump - plain
        medians["cpp" if impl == cpp_impl else "python"] = {"plain_ms": plain, "dump_ms": dump}
        print(f"  {impl:25}  plain {plain:8.2f}  with the dump {dump:8.2f}  "
              f"the dump adds {adds[impl]:+8.2f} ({(dump / plain - 1) * 100:+.1f}%)")
    ratio = adds[cpp_impl] / adds["msprobe Python"]
    print(f"  modhooks adds / msprobe adds: {ratio:.3f} (goal <= {GOAL}: "
          f"{'met' if ratio <= GOAL else 'not met'})")
    if a.json:
        a.json.write_text(json.dumps({**medians, "ratio": ratio, "goal": GOAL,
                                      "launches": a.launches, "rounds": a.rounds,
                                      "steps": a.steps}))
    print(f"run took {time.perf_counter() - began:.0f} s, load average now "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
