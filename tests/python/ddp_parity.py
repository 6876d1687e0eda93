# SPDX-License-Identifier: BSD-3-Clause
"""DDP parity: C++ ranks (modhooks::dist) against Python DDP ranks, same torch, seeds and shards.

  ddp_parity.py run --binary B --mode M --nproc N --dir D [--expect-differ]
writes D/init.pt and D/data.pt, runs N Python DDP ranks (this file's `worker`) and N C++ ranks
(`torchrun --no-python B M D`), and compares rank 0's state dicts bitwise.
  ddp_parity.py errors --binary B --mode M --nproc N --dir D
runs only the C++ ranks of an error mode (each rank checks its own error).
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 24


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


def worker(d, mode):
    dist.init_process_group("gloo")
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
    if mode in ("cpp_hook", "skip_allreduce"):
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
    dist.barrier()
    dist.destroy_process_group()


def torchrun(nproc, *cmd):
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    args = [exe, "--standalone", "--nproc-per-node", str(nproc), *cmd]
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, timeout=300).returncode


def compare(d, expect_differ):
    cpp = torch.load(os.path.join(d, "cpp.pt"))
    py = torch.load(os.path.join(d, "python.pt"))
    if list(cpp.keys()) != list(py.keys()):
        print(f"keys differ: C++ {list(cpp.keys())} Python {list(py.keys())}")
        return 1
    differ = [k for k in py if not torch.equal(cpp[k], py[k])]
    for k in differ:
        print(f"{k}: max |C++ - Python| = {(cpp[k].double() - py[k].double()).abs().max():.3g}")
    if expect_differ:
        print("differs as expected" if differ else "equal although it must differ")
        return 0 if differ else 1
    print("bitwise equal" if not differ else f"{len(differ)} of {len(py)} entries differ")
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["run", "errors", "worker"])
    ap.add_argument("--binary")
    ap.add_argument("--mode", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--expect-differ", action="store_true")
    a = ap.parse_args()
    if a.command == "worker":
        worker(a.dir, a.mode)
        return 0
    if a.command == "errors":
        return torchrun(a.nproc, "--no-python", a.binary, a.mode, a.dir)
    for f in ("cpp.pt", "python.pt"):
        if os.path.exists(os.path.join(a.dir, f)):
            os.remove(os.path.join(a.dir, f))
    prepare(a.dir, a.mode, a.nproc)
    py_mode = "cpp_hook" if a.mode == "skip_allreduce" else a.mode
    if torchrun(a.nproc, os.path.abspath(__file__), "worker", "--mode", py_mode, "--dir", a.dir):
        return 1
    if torchrun(a.nproc, "--no-python", a.binary, a.mode, a.dir):
        return 1
    return compare(a.dir, a.expect_differ)


if __name__ == "__main__":
    sys.exit(main())
