# SPDX-License-Identifier: BSD-3-Clause
"""The Python half of the fsdp_train example: a C++ model sharded as Python's fully_shard shards it.

usage: fsdp_train.py python DIR    writes the initial weights (DIR/init.pt) and every rank's
                                   batches (DIR/data.pt), then trains `Net` below on 2 ranks under
                                   torchrun with Python's fully_shard: each rank's shards to
                                   DIR/py.<rank>.pt, rank 0 the full state dict to DIR/py_full.pt
       fsdp_train.py compare DIR   compares fsdp_train.cpp's DIR/cpp.<rank>.pt and cpp_full.pt with
                                   Python's bitwise (keys in order, dtypes, shapes, values) and
                                   prints the verdict; exits 1 naming what differs
       fsdp_train.py worker DIR    one Python rank (internal: `python` starts it under torchrun)

fsdp_train.cpp is the C++ port of `Net`, sharded with modhooks::dist::fully_shard in the same
groups (each block, then the root) and trained with the same steps and optimizer.
"""
import os
import pathlib
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

RANKS, STEPS, BATCH, WIDTH, OUT = 2, 10, 16, 64, 5


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = nn.Linear(width, 4 * width)
        self.b = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(WIDTH) for _ in range(3))
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def python_run(d):
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.pt"):  # an earlier run's files must not pass for this one's
        old.unlink()
    torch.manual_seed(0)
    torch.save(Net().state_dict(), d / "init.pt")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(RANKS, STEPS, BATCH, WIDTH, generator=g)  # x[rank][step]: a rank's batch
    teacher = torch.randn(WIDTH, OUT, generator=g) / WIDTH ** 0.5
    torch.save({"x": x, "y": torch.tanh(x @ teacher)}, d / "data.pt")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(RANKS), os.path.abspath(__file__), "worker", str(d)]
    print("+ torchrun " + " ".join(command[3:]), flush=True)
    return subprocess.run(command).returncode


def worker(d):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = Net()
    model.load_state_dict(torch.load(d / "init.pt"))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.load(d / "data.pt")
    x, y = data["x"][rank], data["y"][rank]
    for step in range(len(x)):
        loss = F.mse_loss(model(x[step]), y[step])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"Python step {step + 1}: loss {loss.item():.6f}", flush=True)
    shards = {name: p.to_local().detach().clone() for name, p in model.named_parameters()}
    torch.save(shards, d / f"py.{rank}.pt")
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        torch.save(full, d / "py_full.pt")
    dist.barrier()
    # Leave without Python's teardown of the process group (see tests/python/ddp_parity.py).
    sys.stdout.flush()
    os._exit(0)


def difference(cpp, py):
    """What differs between two {name: tensor} dicts, bitwise; None when nothing does."""
    if list(cpp) != list(py):
        return f"keys {list(cpp)} against {list(py)}"
    for k in cpp:
        if cpp[k].dtype != py[k].dtype or cpp[k].shape != py[k].shape:
            return (f"{k}: {cpp[k].dtype} {list(cpp[k].shape)} against {py[k].dtype} "
                    f"{list(py[k].shape)}")
    bad = [k for k in cpp if not torch.equal(cpp[k], py[k])]
    if not bad:
        return None
    worst = max((cpp[k].double() - py[k].double()).abs().max().item() for k in bad)
    return (f"{len(bad)} of {len(cpp)} tensors differ ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}), max diff {worst:.3g}")


def compare(d):
    pairs = [(f"cpp.{r}.pt", f"py.{r}.pt") for r in range(RANKS)] + [("cpp_full.pt", "py_full.pt")]
    missing = [p for pair in pairs for p in pair if not (d / p).exists()]
    if missing:
        print(f"fsdp_train: missing in {d}: {', '.join(missing)}")
        return 1
    whys = [f"{cpp} against {py}: {why}" for cpp, py in pairs
            if (why := difference(torch.load(d / cpp), torch.load(d / py))) is not None]
    if whys:
        print("\n".join(whys))
        print(f"fsdp_train: C++ fully_shard's shards are not Python's ({len(whys)} of "
              f"{len(pairs)} files differ)")
        return 1
    n = len(torch.load(d / "cpp.0.pt"))
    print(f"C++ fully_shard shards equal Python's bitwise on {RANKS} ranks ({n} tensors each), "
          "and the full state dict too")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("python", "compare", "worker"):
        sys.exit(__doc__)
    command, d = sys.argv[1], pathlib.Path(sys.argv[2])
    sys.exit({"python": python_run, "compare": compare, "worker": worker}[command](d))
