# SPDX-License-Identifier: BSD-3-Clause
"""What the step benchmarks of modhooks::dist share in Python (ddp_step_bench.py,
fsdp_step_bench.py): bench/rounds.h's `alternate`, in Python, and a torchrun launch."""
import json
import os
import subprocess
import sys
import time

import torch.distributed as dist


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
