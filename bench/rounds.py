# SPDX-License-Identifier: BSD-3-Clause
"""What the step benchmarks of modhooks::dist share in Python (ddp_step_bench.py,
fsdp_step_bench.py): their command line, bench/rounds.h's `alternate`, in Python, and torchrun
launches."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch.distributed as dist


def parse_args(steps, rounds, *options):
    """The command line of a step benchmark: `worker` (its Python ranks, under torchrun) or the
    driver, which needs --binary; --nproc, --launches, --steps and --rounds (`steps` and `rounds`
    their defaults), and the string `options` (--library ...)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("command", nargs="?", choices=["worker"])
    ap.add_argument("--binary")
    for option in options:
        ap.add_argument(option)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--rounds", type=int, default=rounds)
    a = ap.parse_args()
    if a.command != "worker" and not a.binary:
        ap.error("--binary is needed")
    return a


def run_launches(a, cpp, python, launch, line):
    """Runs `a.launches` pairs of launches of the commands `cpp` and `python`, the order flipping
    each pair, each through `launch(a.nproc, *cmd)`, which returns rank 0's record or every
    rank's (rank 0's first); prints `line(rank 0's record)` for each. Returns what `launch`
    returned, in a list per implementation (the records' "impl"), C++ first."""
    results = {}
    for i in range(a.launches):
        for cmd in (cpp, python) if i % 2 == 0 else (python, cpp):
            out = launch(a.nproc, *cmd)
            r = out[0] if isinstance(out, list) else out
            results.setdefault(r["impl"], []).append(out)
            print(f"  launch {i}: {r['impl']:12}  {line(r)}", flush=True)
    return results


def torchrun_json(nproc, *cmd):
    """Runs one torchrun of `nproc` ranks and returns the JSON lines they printed."""
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run([exe, "--standalone", "--nproc-per-node", str(nproc), *cmd],
                         check=True, stdout=subprocess.PIPE, text=True, timeout=600).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], out


def alternate(baseline, measured, steps, rounds):
    """Milliseconds per step of `baseline` and of `measured` in each of `rounds` rounds, after one
    warm-up round: each round times `steps` steps of one, then of the other, the order flipping
    each round, every block started by all ranks together."""
    def timed(step):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) * 1e3 / steps

    baseline_ms, measured_ms = [], []
    for rnd in range(-1, rounds):
        dist.barrier()
        if rnd % 2 == 0:
            b = timed(baseline)
            dist.barrier()
            m = timed(measured)
        else:
            m = timed(measured)
            dist.barrier()
            b = timed(baseline)
        if rnd >= 0:
            baseline_ms.append(b)
            measured_ms.append(m)
    return baseline_ms, measured_ms
