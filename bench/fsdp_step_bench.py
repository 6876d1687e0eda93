# SPDX-License-Identifier: BSD-3-Clause
"""Step time and memory of modhooks::dist's fully_shard in C++ against Python's FSDP2.

  fsdp_step_bench.py --binary build/bench/fsdp_step_bench [--nproc 2] [--launches 3]
                     [--steps 5] [--rounds 6] [--library LIB]
alternates launches of the C++ ranks (`torchrun --no-python <binary>`) and of Python
`fully_shard` ranks (this file's `worker`), the order flipping each launch pair, gloo on CPU.
Each launch trains the same model (Linear(13,512), ReLU, 7 x (Linear(512,512), ReLU),
Linear(512,5): 1,848,325 parameters, 7,393,300 bytes; batch 64 x 13 per rank, MSE, SGD(0.01,
momentum 0.9), one intra-op thread per rank) twice in each process: with every Linear and then
the root sharded, and, as the baseline, unsharded and trained by the process alone (see
bench/fsdp_step_bench.cpp). Both languages read memory from one counter of live CPU allocator
bytes, LIB (build/bench/libmodhooks_bench_cpu_memory.so beside the binary, bench/cpu_memory.cpp),
which C++ links and Python loads with torch.ops.load_library before building anything.

Prints each launch's step times and the median over launches, then the memory figures of the
last launch of each language, rank 0 and the largest over the ranks:
  shards       bytes of the storages of parameters() (FSDP: the padded shards of this rank)
  model        live bytes the model added when built and sharded (should equal shards)
  param peak   peak live bytes during a no_grad forward of one row, minus those live before it:
               the gathered parameters and their gather buffers (activations of one row: ~2 KiB)
  step peak    the same during one step (forward, backward, SGD step, zero_grad) of the batch:
               everything a step needs beside the model and the momentum; then the same peak
               in each phase (forward and loss, backward, SGD step and zero_grad)
and the goal of the issue: shards + param peak against shards + one group's unsharded bytes.
"""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from rounds import alternate, parse_args, run_launches, torchrun_json

HIDDEN, LAYERS = 512, 9
GROUP_BYTES = (512 * 512 + 512) * 4  # one Linear(512,512), unsharded: 1,050,624


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.ModuleList(
            nn.Linear(13 if i == 0 else HIDDEN, 5 if i == LAYERS - 1 else HIDDEN)
            for i in range(LAYERS))

    def forward(self, x):
        for fc in self.fc[:-1]:
            x = torch.relu(fc(x))
        return self.fc[-1](x)


def storage_bytes(module):
    """Bytes of the distinct storages behind module.parameters() (a DTensor's local shard)."""
    seen, total = set(), 0
    for p in module.parameters():
        s = (p.to_local() if hasattr(p, "to_local") else p).untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def worker(steps, rounds, library):
    """bench/fsdp_step_bench.cpp's main, in Python."""
    torch.ops.load_library(library)  # before any tensor of the models
    mem = torch.ops.modhooks_bench
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))

    def live():
        return mem.cpu_memory()[0]

    torch.manual_seed(0)
    before = live()
    local_net = Mlp()
    local_model_bytes = live() - before
    before = live()
    fsdp_net = Mlp()
    for fc in fsdp_net.fc:
        fully_shard(fc, mesh=mesh)
    fully_shard(fsdp_net, mesh=mesh)
    fsdp_model_bytes = live() - before

    local_opt = torch.optim.SGD(local_net.parameters(), lr=0.01, momentum=0.9)
    fsdp_opt = torch.optim.SGD(fsdp_net.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(64, 13), torch.randn(64, 5)
    one_row = torch.randn(1, 13)

    def local_loss():
        return F.mse_loss(local_net(x), y)

    def local_update():
        local_opt.step()
        local_opt.zero_grad()

    def fsdp_loss():
        return F.mse_loss(fsdp_net(x), y)

    def fsdp_update():
        fsdp_opt.step()
        fsdp_opt.zero_grad()

    def local_step():
        local_loss().backward()
        local_update()

    def fsdp_step():
        fsdp_loss().backward()
        fsdp_update()

    local_ms, fsdp_ms = alternate(local_step, fsdp_step, steps, rounds)

    def peak_beside(f):
        """Peak live bytes while f runs, minus those live before."""
        before = live()
        mem.reset_cpu_peak()
        f()
        return mem.cpu_memory()[1] - before

    def step_peaks(loss_of_forward, update):
        """One step's peak live bytes beside those live before it, by phase (the C++ twin's)."""
        before = live()
        mem.reset_cpu_peak()
        loss = loss_of_forward()
        forward = mem.cpu_memory()[1] - before
        mem.reset_cpu_peak()
        loss.backward()
        backward = mem.cpu_memory()[1] - before
        mem.reset_cpu_peak()
        update()
        optimizer = mem.cpu_memory()[1] - before
        del loss
        return {"step_extra": max(forward, backward, optimizer), "forward_extra": forward,
                "backward_extra": backward, "optimizer_extra": optimizer,
                "step_left": live() - before}

    dist.barrier()
    local_peaks = step_peaks(local_loss, local_update)
    fsdp_peaks = step_peaks(fsdp_loss, fsdp_update)
    with torch.no_grad():
        local_param_extra = peak_beside(lambda: local_net(one_row))
        fsdp_param_extra = peak_beside(lambda: fsdp_net(one_row))

    # One write: the ranks share torchrun's stdout, and a line must not interleave with another.
    line = json.dumps({
        "impl": "Python FSDP", "rank": rank, "world": dist.get_world_size(), "steps": steps,
        "rounds": rounds, "local_ms": statistics.median(local_ms),
        "fsdp_ms": statistics.median(fsdp_ms),
        "local": {"model_bytes": local_model_bytes, "shard_bytes": storage_bytes(local_net),
                  "param_extra": local_param_extra, **local_peaks},
        "fsdp": {"model_bytes": fsdp_model_bytes, "shard_bytes": storage_bytes(fsdp_net),
                 "param_extra": fsdp_param_extra, **fsdp_peaks}})
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    dist.barrier()
    dist.destroy_process_group()


def launch(nproc, *cmd):
    """Runs one torchrun and returns every rank's JSON line, by rank."""
    lines, out = torchrun_json(nproc, *cmd)
    if sorted(r["rank"] for r in lines) != list(range(nproc)):
        sys.exit(f"no figures from every rank of {cmd}:\n{out}")
    return sorted(lines, key=lambda r: r["rank"])


def main():
    a = parse_args(5, 6, "--library")
    if a.command == "worker":
        worker(a.steps, a.rounds, a.library)
        return
    library = os.path.abspath(a.library or os.path.join(os.path.dirname(a.binary),
                                                        "libmodhooks_bench_cpu_memory.so"))
    args = [str(a.steps), str(a.rounds)]
    cpp = ["--no-python", a.binary, *args]
    python = [os.path.abspath(__file__), "worker", "--steps", args[0], "--rounds", args[1],
              "--library", library]
    print(f"torch {torch.__version__}, gloo on CPU, {a.nproc} ranks, {os.cpu_count()} cores, "
          f"{a.launches} launches per language of {a.rounds} rounds x {a.steps} steps, "
          f"load average {os.getloadavg()[0]:.2f} (other work on the cores shifts the times)")
    results = run_launches(
        a, cpp, python, launch,
        lambda r: f"no FSDP {r['local_ms']:7.3f} ms  FSDP {r['fsdp_ms']:7.3f} ms  (rank 0)")
    print("median over launches, ms per step, rank 0 (same processes, alternating blocks):")
    summary = {}
    for impl, launches in results.items():
        local = statistics.median(ranks[0]["local_ms"] for ranks in launches)
        fsdp = statistics.median(ranks[0]["fsdp_ms"] for ranks in launches)
        summary[impl] = fsdp
        print(f"  {impl:12}  no FSDP {local:7.3f}  FSDP {fsdp:7.3f}  "
              f"FSDP adds {fsdp - local:+7.3f} ({(fsdp / local - 1) * 100:+.1f}%)")
    print(f"  C++ FSDP step / Python FSDP step: "
          f"{summary['modhooks C++'] / summary['Python FSDP']:.3f}")

    print(f"memory, bytes (last launch; rank 0 / largest over ranks); one group, Linear(512,512) "
          f"unsharded: {GROUP_BYTES:,}")
    cols = [("shards", "shard_bytes"), ("model", "model_bytes"), ("param peak", "param_extra"),
            ("step peak", "step_extra")]
    print(f"  {'':24}" + "".join(f"{c:>24}" for c, _ in cols) + f"{'shards+param peak':>24}"
          f"{'goal: shards+1 group':>24}")

    def cell(ranks, field, key):
        vals = [r[field][key] for r in ranks]
        return f"{vals[0]:,} / {max(vals):,}"

    rows = [("unsharded (C++ process)", results["modhooks C++"][-1], "local"),
            ("unsharded (Py process)", results["Python FSDP"][-1], "local"),
            ("modhooks C++ FSDP", results["modhooks C++"][-1], "fsdp"),
            ("Python FSDP", results["Python FSDP"][-1], "fsdp")]
    for name, ranks, field in rows:
        total = [r[field]["shard_bytes"] + r[field]["param_extra"] for r in ranks]
        goal = [r[field]["shard_bytes"] + (GROUP_BYTES if field == "fsdp" else 0) for r in ranks]
        print(f"  {name:24}" + "".join(f"{cell(ranks, field, k):>24}" for _, k in cols) +
              f"{f'{total[0]:,} / {max(total):,}':>24}{f'{goal[0]:,} / {max(goal):,}':>24}")
    print("  one step's peak by phase, beside the live bytes before the step (rank 0 / largest):")
    phases = [("forward", "forward_extra"), ("backward", "backward_extra"),
              ("optimizer", "optimizer_extra")]
    print(f"  {'':24}" + "".join(f"{c:>24}" for c, _ in phases))
    for name, ranks, field in rows:
        print(f"  {name:24}" + "".join(f"{cell(ranks, field, k):>24}" for _, k in phases))
    # The peaks can change from launch to launch (when a buffer is freed can depend on another
    # thread): every launch's, the largest over its ranks.
    for impl, launches in results.items():
        for key in ("param_extra", "step_extra"):
            peaks = [max(r["fsdp"][key] for r in ranks) for ranks in launches]
            print(f"  {impl:12} {key.replace('_extra', ' peak')}, each launch: "
                  + ", ".join(f"{v:,} ({v / GROUP_BYTES:.2f} groups)" for v in peaks))
    over = {impl: max(r["fsdp"]["param_extra"] - GROUP_BYTES for r in results[impl][-1])
            for impl in results}
    for impl, extra in over.items():
        verdict = "within the goal" if extra <= 0 else f"over the goal by {extra:,} bytes"
        print(f"  {impl}, last launch: parameter peak {verdict} "
              f"({extra / GROUP_BYTES + 1:.2f} groups)")


if __name__ == "__main__":
    main()
