# SPDX-License-Identifier: BSD-3-Clause
"""DDP parity: C++ ranks (modhooks::dist) against Python DDP ranks, same torch, seeds and shards.

  ddp_parity.py run --binary B --nproc N --dir D [--modes M ...]
writes D/<mode>/init.pt and data.pt for every mode (all of MODES by default), then starts one
torchrun of N Python DDP ranks (this file's `worker`) that trains every mode in turn, and one
torchrun of N C++ ranks (`B D <mode>...`) that does the same; it compares rank 0's state dicts of
each mode bitwise and prints a line per mode. It fails naming every mode that diverged (or, in
skip_allreduce, did not), and the mode a launch failed in. One launch per language, not per mode:
starting torchrun and its ranks costs far more than a mode's 24 steps.
  ddp_parity.py errors --binary B --mode M --nproc N --dir D
runs only the C++ ranks of an error mode (each rank checks its own error).
"""
import argparse
import os
import shutil
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_runs import torchrun, verdict

STEPS = 24
MODES = ["default", "find_unused", "static_graph", "bucket_view", "no_sync", "fp16", "bf16",
         "cpp_hook", "allreduce_hook", "batchnorm", "skip_allreduce"]
# C++ modes compared with another mode's Python run, and expected to differ from it: without the
# all-reduce the ranks drift apart, and the comparison must see it.
EXPECT_DIFFER = {"skip_allreduce": "cpp_hook"}


class Net(nn.Module):
    def __init__(self, bn, extra):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        if bn:
            self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)
        if extra:
            self.extra = nn.Linear(32, 4)
        self.has_bn = bn

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.has_bn:
            h = self.bn(h)
        h = torch.relu(self.fc2(h))
        return self.fc3(h)


def prepare(d, mode, nproc):
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    net = Net(mode == "batchnorm", mode == "find_unused")
    torch.save(net.state_dict(), os.path.join(d, "init.pt"))
    g = torch.Generator().manual_seed(1)
    data = {"steps": torch.tensor(STEPS)}
    micro = 2 * STEPS if mode == "no_sync" else STEPS
    for r in range(nproc):
        for s in range(micro):
            data[f"x.{r}.{s}"] = torch.randn(8, 16, generator=g)
            data[f"y.{r}.{s}"] = torch.randn(8, 4, generator=g)
    torch.save(data, os.path.join(d, "data.pt"))


def half_mean_hook(state, bucket):
    t = bucket.buffer().div_(2 * dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def train(d, mode):
    """One mode under Python's DDP; tests/dist/ddp_parity.cpp's `train` is its C++ twin."""
    rank = dist.get_rank()
    net = Net(mode == "batchnorm", mode == "find_unused")
    net.load_state_dict(torch.load(os.path.join(d, "init.pt")))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(rank * 0.01)
    kwargs = {}
    if mode == "find_unused":
        kwargs["find_unused_parameters"] = True
    if mode == "static_graph":
        kwargs["static_graph"] = True
    if mode == "bucket_view":
        kwargs.update(gradient_as_bucket_view=True, bucket_cap_mb=0.002)
    ddp = DDP(net, **kwargs)
    if mode == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if mode == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    if mode == "allreduce_hook":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    if mode == "cpp_hook":
        ddp.register_comm_hook(None, half_mean_hook)
    data = torch.load(os.path.join(d, "data.pt"))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    def loss(s):
        x, y = data[f"x.{rank}.{s}"], data[f"y.{rank}.{s}"]
        return (ddp(x) - y).pow(2).mean()

    for step in range(int(data["steps"])):
        if mode == "no_sync":
            with ddp.no_sync():
                loss(2 * step).backward()
            loss(2 * step + 1).backward()
        else:
            loss(step).backward()
        opt.step()
        opt.zero_grad(set_to_none=mode != "bucket_view")
    if rank == 0:
        torch.save(ddp.state_dict(), os.path.join(d, "python.pt"))


def worker(d, modes):
    dist.init_process_group("gloo")
    for mode in modes:
        try:
            train(os.path.join(d, mode), mode)
        except Exception as e:
            # The other ranks may wait in a collective of this mode: exit, torchrun stops them.
            print(f"mode {mode}: FAILED in Python DDP on rank {dist.get_rank()}: {e!r}",
                  flush=True)
            os._exit(1)
        dist.barrier()
        if dist.get_rank() == 0:
            print(f"mode {mode}: done", flush=True)
    # Every mode's result is saved and the last barrier passed: leave without Python's teardown of
    # the process group and the interpreter, which aborted a rank once in a loaded CI run after
    # every mode was done ("terminate called without an active exception", exit -6).
    sys.stdout.flush()
    os._exit(0)


def compare(d, mode):
    """Compares one mode's files; returns None when it passes, else why it failed."""
    cpp_path = os.path.join(d, mode, "cpp.pt")
    py_path = os.path.join(d, EXPECT_DIFFER.get(mode, mode), "python.pt")
    missing = [p for p in (cpp_path, py_path) if not os.path.exists(p)]
    if missing:
        return f"not run ({', '.join(missing)} missing: its launch failed at or before it)"
    cpp, py = torch.load(cpp_path), torch.load(py_path)
    if list(cpp.keys()) != list(py.keys()):
        return f"keys differ: C++ {list(cpp.keys())} Python {list(py.keys())}"
    differ = [k for k in py if not torch.equal(cpp[k], py[k])]
    if mode in EXPECT_DIFFER:
        return None if differ else "bitwise equal to Python, although it must differ"
    if not differ:
        return None
    worst = ", ".join(f"{k} max |C++ - Python| = {(cpp[k].double() - py[k].double()).abs().max():.3g}"
                      for k in differ[:3])
    return f"{len(differ)} of {len(py)} entries differ ({worst})"


def run(binary, nproc, d, modes):
    # Files of an earlier run must not pass for this one's.
    for mode in modes:
        shutil.rmtree(os.path.join(d, mode), ignore_errors=True)
    py_modes = []
    for mode in modes:
        prepare(os.path.join(d, mode), mode, nproc)
        py_mode = EXPECT_DIFFER.get(mode, mode)
        if py_mode not in py_modes:
            py_modes.append(py_mode)
    for py_mode in py_modes:
        if py_mode not in modes:
            prepare(os.path.join(d, py_mode), py_mode, nproc)
    py_rc = torchrun(nproc, os.path.abspath(__file__), "worker", "--dir", d, "--modes", *py_modes)
    cpp_rc = torchrun(nproc, "--no-python", binary, d, *modes)
    print(f"DDP parity, {nproc} ranks, {STEPS} steps, C++ ranks against Python DDP ranks:")
    return verdict(modes, lambda mode: compare(d, mode), py_rc, cpp_rc,
                   lambda mode: mode + (" (must differ)" if mode in EXPECT_DIFFER else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["run", "errors", "worker"])
    ap.add_argument("--binary")
    ap.add_argument("--mode", help="errors: the error mode")
    ap.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    if a.command == "worker":
        worker(a.dir, a.modes)
        return 0
    if a.command == "errors":
        return torchrun(a.nproc, "--no-python", a.binary, a.dir, a.mode)
    return run(a.binary, a.nproc, a.dir, a.modes)


if __name__ == "__main__":
    sys.exit(main())
