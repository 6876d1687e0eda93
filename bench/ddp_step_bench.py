# SPDX-License-Identifier: BSD-3-Clause
"""Step time of modhooks::dist's DistributedDataParallel in C++ against Python's DDP.

  ddp_step_bench.py --binary build/bench/ddp_step_bench [--nproc 2] [--launches 3]
                    [--steps 20] [--rounds 10]
alternates launches of the C++ ranks (`torchrun --no-python <binary>`) and of Python DDP ranks
(this file's `worker`), the order flipping each launch pair, gloo on CPU. Each launch times the
same step (MLP 256-1024-1024-10, batch 64, MSE, SGD, one intra-op thread per rank) with DDP and,
as its baseline, without DDP in the same processes, in alternating blocks (see
bench/ddp_step_bench.cpp). Prints each launch's figures and the median over launches: the
no-DDP step, the DDP step and what DDP adds, for each language.
"""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from rounds import alternate, parse_args, run_launches, torchrun_json


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def worker(steps, rounds):
    """bench/ddp_step_bench.cpp's main, in Python."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    local_net, ddp_net = Mlp(), Mlp()
    ddp = DDP(ddp_net)
    local_opt = torch.optim.SGD(local_net.parameters(), lr=0.01)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(64, 256), torch.randn(64, 10)

    def local_step():
        F.mse_loss(local_net(x), y).backward()
        local_opt.step()
        local_opt.zero_grad()

    def ddp_step():
        F.mse_loss(ddp(x), y).backward()
        ddp_opt.step()
        ddp_opt.zero_grad()

    local_ms, ddp_ms = alternate(local_step, ddp_step, steps, rounds)
    if rank == 0:
        print(json.dumps({"impl": "Python DDP", "world": dist.get_world_size(), "steps": steps,
                          "rounds": rounds, "local_ms": statistics.median(local_ms),
                          "ddp_ms": statistics.median(ddp_ms)}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def launch(nproc, *cmd):
    """Runs one torchrun and returns rank 0's JSON line."""
    lines, out = torchrun_json(nproc, *cmd)
    if len(lines) != 1:
        sys.exit(f"no figures from {cmd}:\n{out}")
    return lines[0]


def main():
    a = parse_args(20, 10)
    if a.command == "worker":
        worker(a.steps, a.rounds)
        return
    args = [str(a.steps), str(a.rounds)]
    cpp = ["--no-python", a.binary, *args]
    python = [os.path.abspath(__file__), "worker", "--steps", *args[:1], "--rounds", *args[1:]]
    print(f"torch {torch.__version__}, gloo on CPU, {a.nproc} ranks, {os.cpu_count()} cores, "
          f"{a.launches} launches per language of {a.rounds} rounds x {a.steps} steps")
    results = run_launches(a, cpp, python, launch,
                           lambda r: f"no DDP {r['local_ms']:7.3f} ms  DDP {r['ddp_ms']:7.3f} ms")
    print("median over launches, ms per step (same processes, alternating blocks):")
    summary = {}
    for impl, rs in results.items():
        local = statistics.median(r["local_ms"] for r in rs)
        ddp = statistics.median(r["ddp_ms"] for r in rs)
        summary[impl] = ddp
        print(f"  {impl:12}  no DDP {local:7.3f}  DDP {ddp:7.3f}  "
              f"DDP adds {ddp - local:+7.3f} ({(ddp / local - 1) * 100:+.1f}%)")
    print(f"  C++ DDP step / Python DDP step: "
          f"{summary['modhooks C++'] / summary['Python DDP']:.3f}")


if __name__ == "__main__":
    main()
