# SPDX-License-Identifier: BSD-3-Clause
"""FSDP parity: C++ ranks (modhooks::dist::fully_shard) against Python FSDP2 `fully_shard` ranks.

  fsdp_parity.py run --binary B --nproc N --dir D [--modes M ...]
writes D/<mode>/init.pt and data.pt for every mode (all of MODES by default), then starts one
torchrun of N C++ ranks (`B D <mode>...`) that trains every mode in turn, and after it one torchrun
of N Python ranks (this file's `worker`) that does the same under Python's `fully_shard` on gloo.
Each rank of each language saves its local shards, {name: to_local()} in named_parameters' order
(D/<mode>/cpp.<rank>.pt, py.<rank>.pt), and rank 0 the full state dict (cpp_full.pt,
py_full.pt); they must be equal bitwise, keys, order, dtypes and shapes included. As both sides
could share a collective's bug, the driver also trains one unsharded model on all ranks' batches
together and checks py_full.pt against it within 1e-6. In mode state_dict the Python ranks also
load the C++ ranks' full checkpoint (cpp_full.pt) into a fresh sharded model with
set_model_state_dict and check that every rank's shards equal the C++ rank's bitwise
(D/<mode>/load.<rank>.txt holds each rank's verdict). It prints a line per mode and fails naming
every mode that diverged, and the mode a launch failed in. One launch per language, not per mode:
starting torchrun and its ranks costs far more than a mode's 10 steps.
`--self-check` puts this file's worker in the C++ binary's place (it then saves cpp.* files): the
oracle checked against itself, the reference and its own checkpoint, with no C++ built.
  fsdp_parity.py errors --binary B --mode M --nproc N --dir D
runs only the C++ ranks of an error mode (each rank checks its own error); passes iff they exit 0.
  fsdp_parity.py worker D <mode>...
the Python ranks (internal: `run` starts them under torchrun).
"""
import argparse
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from dist_runs import torchrun, verdict

STEPS = 10
MODES = ["mlp", "uneven", "nested", "twice", "no_reshard", "reshard_root", "accum", "state_dict",
         "adam", "mp", "mp_accum"]
ACCUM = ("accum", "mp_accum")  # two micro-batches a step, the first without gradient sync
# Mixed precision: bf16 parameters and inputs in forward and backward; mp also reduces in fp32,
# mp_accum (no reduce_dtype) reduces in the parameters' fp32 and accumulates in it across its
# unsynced micro-batches.
MP_POLICY = {"mp": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
             "mp_accum": MixedPrecisionPolicy(param_dtype=torch.bfloat16)}
ATOL = 1e-6  # py_full.pt against one unsharded process on all ranks' batches
ATOL_MP = 5e-2  # the same for the bf16 modes, against the fp32 process


class Net(nn.Module):
    def __init__(self, out=5):
        super().__init__()
        self.fc1 = nn.Linear(13, 32)
        self.fc2 = nn.Linear(32, 17)
        self.fc3 = nn.Linear(17, out)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.a = nn.Linear(n_in, 24)
        self.b = nn.Linear(24, n_out)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Net2(nn.Module):
    def __init__(self):
        super().__init__()
        self.block0 = Block(13, 16)
        self.block1 = Block(16, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(torch.relu(self.block1(torch.relu(self.block0(x)))))


class NetTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(13, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
        return self.fc3(torch.relu(self.fc2(h)))


def make_model(mode):
    if mode in ("nested", "reshard_root"):
        return Net2()
    if mode == "twice":
        return NetTwice()
    return Net(4 if mode == "uneven" else 5)


def shard(model, mode, mesh):
    """Python's sharding of a mode, bottom-up; tests/dist/fsdp_parity.cpp shards alike."""
    kwargs = {"mesh": mesh}
    if mode == "no_reshard":
        kwargs["reshard_after_forward"] = False
    if mode == "reshard_root":
        kwargs["reshard_after_forward"] = True
    if mode in MP_POLICY:
        kwargs["mp_policy"] = MP_POLICY[mode]
    if mode in ("nested", "reshard_root"):
        groups = [model.block0, model.block1]  # the root's group holds head's parameters
    else:
        groups = [model.fc1, model.fc2, model.fc3]
    for module in groups:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def make_optimizer(mode, params):
    if mode == "adam":
        return torch.optim.Adam(params, lr=0.01, foreach=False)  # single-tensor, on purpose
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def prepare(d, mode, nproc):
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = make_model(mode)
    torch.save(model.state_dict(), os.path.join(d, "init.pt"))
    n_out = 4 if mode == "uneven" else 5
    g = torch.Generator().manual_seed(1)
    data = {"steps": torch.tensor(STEPS)}
    micro = 2 * STEPS if mode in ACCUM else STEPS
    for r in range(nproc):
        for k in range(micro):
            data[f"x.{r}.{k}"] = torch.randn(8, 13, generator=g, dtype=torch.float32)
            data[f"y.{r}.{k}"] = torch.randn(8, n_out, generator=g, dtype=torch.float32)
    torch.save(data, os.path.join(d, "data.pt"))


def fit(model, mode, data, batch):
    """The training of every mode; `batch(k)` gives micro-batch k's (x, y)."""
    opt = make_optimizer(mode, model.parameters())

    def backward(k):
        x, y = batch(k)
        F.mse_loss(model(x).float(), y).backward()

    for step in range(int(data["steps"])):
        if mode in ACCUM:
            if hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(False)
            backward(2 * step)
            if hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(True)
            backward(2 * step + 1)
        else:
            backward(step)
        opt.step()
        opt.zero_grad(set_to_none=True)


def local_shards(model):
    return {name: p.to_local().detach().clone() for name, p in model.named_parameters()}


def train(d, mode, mesh, tag):
    """One mode under Python's fully_shard; tests/dist/fsdp_parity.cpp's twin does it in C++."""
    rank = dist.get_rank()
    if mode == "state_dict":
        # Sharded first, from other weights than init.pt's (a load that did nothing must show),
        # then rank 0's full init.pt broadcast into the shards.
        torch.manual_seed(1)
        model = shard(make_model(mode), mode, mesh)
        sd = torch.load(os.path.join(d, "init.pt")) if rank == 0 else {}
        set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True,
                                                                 broadcast_from_rank0=True))
    else:
        model = make_model(mode)
        model.load_state_dict(torch.load(os.path.join(d, "init.pt")))
        shard(model, mode, mesh)
    data = torch.load(os.path.join(d, "data.pt"))
    fit(model, mode, data, lambda k: (data[f"x.{rank}.{k}"], data[f"y.{rank}.{k}"]))
    torch.save(local_shards(model), os.path.join(d, f"{tag}.{rank}.pt"))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        torch.save(full, os.path.join(d, f"{tag}_full.pt"))


def diff(a, b, exact, atol=0.0):
    """Compares two {name: tensor} dicts; returns None when they agree, else what differs."""
    if list(a.keys()) != list(b.keys()):
        return f"keys differ: {list(a.keys())} against {list(b.keys())}"
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape:
            return (f"{k}: {a[k].dtype} {list(a[k].shape)} against {b[k].dtype} "
                    f"{list(b[k].shape)}")
    if exact:
        bad = [k for k in a if not torch.equal(a[k], b[k])]
    else:
        bad = [k for k in a if not torch.allclose(a[k], b[k], rtol=0, atol=atol)]
    if not bad:
        return None
    worst = max((a[k].double() - b[k].double()).abs().max().item() for k in bad)
    return f"{len(bad)} of {len(a)} entries differ ({', '.join(bad[:3])}): max diff {worst:.3g}"


def check_load(d, mode, mesh):
    """Python FSDP loads the C++ ranks' full checkpoint: every rank's shards must equal C++'s.

    The verdict goes to D/<mode>/load.<rank>.txt ("ok" or what failed), for the driver to report.
    """
    rank = dist.get_rank()
    out = os.path.join(d, f"load.{rank}.txt")
    cpp_full, cpp_local = os.path.join(d, "cpp_full.pt"), os.path.join(d, f"cpp.{rank}.pt")
    if not os.path.exists(cpp_full):  # the same file system for every rank: all skip alike
        why = "cpp_full.pt missing"
    else:
        try:
            torch.manual_seed(2)
            model = shard(make_model(mode), mode, mesh)
            sd = torch.load(cpp_full) if rank == 0 else {}
            set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True,
                                                                     broadcast_from_rank0=True))
            if not os.path.exists(cpp_local):
                why = f"cpp.{rank}.pt missing"
            else:
                why = diff(local_shards(model), torch.load(cpp_local), exact=True)
        except Exception as e:
            with open(out, "w") as f:
                f.write(f"raised {e!r}")
            raise
    with open(out, "w") as f:
        f.write("ok" if why is None else why)


def worker(d, modes, tag="py"):
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    rank = dist.get_rank()
    for mode in modes + (["load"] if tag == "py" and "state_dict" in modes else []):
        try:
            if mode == "load":
                # After every mode's training, so that a load that raises costs no mode.
                check_load(os.path.join(d, "state_dict"), "state_dict", mesh)
            else:
                train(os.path.join(d, mode), mode, mesh, tag)
        except Exception as e:
            # The other ranks may wait in a collective of this mode: exit, torchrun stops them.
            print(f"mode {mode}: FAILED in Python FSDP on rank {rank}: {e!r}", flush=True)
            os._exit(1)
        dist.barrier()
        if rank == 0 and mode != "load":
            print(f"mode {mode}: done", flush=True)
    # Every mode's result is saved and the last barrier passed: leave without Python's teardown of
    # the process group and the interpreter (see ddp_parity.py's worker).
    sys.stdout.flush()
    os._exit(0)


def reference(d, mode, nproc):
    """One unsharded process trained on the concatenation of every rank's batches."""
    model = make_model(mode)
    model.load_state_dict(torch.load(os.path.join(d, "init.pt")))
    data = torch.load(os.path.join(d, "data.pt"))
    fit(model, mode, data, lambda k: tuple(
        torch.cat([data[f"{v}.{r}.{k}"] for r in range(nproc)]) for v in ("x", "y")))
    return {k: v.detach() for k, v in model.state_dict().items()}


def compare(d, mode, nproc):
    """Compares one mode's files; returns None when it passes, else why it failed."""
    d = os.path.join(d, mode)
    pairs = [(f"cpp.{r}.pt", f"py.{r}.pt") for r in range(nproc)] + [("cpp_full.pt", "py_full.pt")]
    paths = [os.path.join(d, p) for pair in pairs for p in pair]
    missing = [os.path.basename(p) for p in paths if not os.path.exists(p)]
    if missing:
        return f"not run ({', '.join(missing)} missing: its launch failed at or before it)"
    whys = []
    for cpp, py in pairs:
        why = diff(torch.load(os.path.join(d, cpp)), torch.load(os.path.join(d, py)), exact=True)
        if why is not None:
            whys.append(f"{cpp} against {py}: {why}")
    atol = ATOL_MP if mode in MP_POLICY else ATOL
    why = diff(torch.load(os.path.join(d, "py_full.pt")), reference(d, mode, nproc), exact=False,
               atol=atol)
    if why is not None:
        whys.append(f"py_full.pt against one process (atol {atol:g}): {why}")
    if mode == "state_dict":
        for r in range(nproc):
            path = os.path.join(d, f"load.{r}.txt")
            verdict = open(path).read() if os.path.exists(path) else "not run"
            if verdict != "ok":
                whys.append(f"rank {r} loading cpp_full.pt into Python FSDP: {verdict}")
    return "; ".join(whys) or None


def run(binary, nproc, d, modes, self_check=False):
    # Files of an earlier run must not pass for this one's.
    for mode in modes:
        shutil.rmtree(os.path.join(d, mode), ignore_errors=True)
        prepare(os.path.join(d, mode), mode, nproc)
    me = os.path.abspath(__file__)
    # C++ first: mode state_dict's Python ranks load the C++ ranks' checkpoint.
    if self_check:
        cpp_rc = torchrun(nproc, me, "worker", d, *modes, "--tag", "cpp")
    else:
        cpp_rc = torchrun(nproc, "--no-python", binary, d, *modes)
    py_rc = torchrun(nproc, me, "worker", d, *modes)
    twin = "Python ranks (--self-check)" if self_check else "C++ ranks"
    print(f"FSDP parity, {nproc} ranks, {STEPS} steps, {twin} against Python fully_shard ranks:")
    return verdict(modes, lambda mode: compare(d, mode, nproc), py_rc, cpp_rc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="C++ ranks against Python ranks, every mode")
    r.add_argument("--binary")
    r.add_argument("--nproc", type=int, default=2)
    r.add_argument("--dir", required=True)
    r.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    r.add_argument("--self-check", action="store_true",
                   help="this file's worker in place of the C++ binary (no --binary needed)")
    e = sub.add_parser("errors", help="the C++ ranks of one error mode")
    e.add_argument("--binary", required=True)
    e.add_argument("--mode", required=True)
    e.add_argument("--nproc", type=int, default=2)
    e.add_argument("--dir", required=True)
    w = sub.add_parser("worker", help="internal: the Python ranks, under torchrun")
    w.add_argument("dir")
    w.add_argument("modes", nargs="+", choices=MODES)
    w.add_argument("--tag", default="py", choices=["py", "cpp"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.command == "worker":
        worker(a.dir, a.modes, a.tag)
        return 0
    if a.command == "errors":
        os.makedirs(a.dir, exist_ok=True)
        return torchrun(a.nproc, "--no-python", a.binary, a.dir, a.mode)
    if a.binary is None and not a.self_check:
        ap.error("run needs --binary (or --self-check)")
    return run(a.binary, a.nproc, a.dir, a.modes, a.self_check)


if __name__ == "__main__":
    sys.exit(main())
