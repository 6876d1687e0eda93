# SPDX-License-Identifier: BSD-3-Clause
"""msprobe as the oracle of modhooks::probe under DDP: two ranks on gloo under torchrun.

    probe_ddp.py run --binary B --dir D
writes D/init.pt (probe_oracle.py's MLP), D/data.pt (each rank's own inputs) and a config.json
per run of RUNS; starts one torchrun of 2 Python ranks (this file's `worker`: msprobe's
PrecisionDebugger on the model under Python's DistributedDataParallel) and one of 2 C++ ranks
(B, tests/probe_ddp_ranks.cpp: modhooks::probe::PrecisionDebugger on the same model under
modhooks::dist::DistributedDataParallel); each launch does every run, 2 steps each. Then
msprobe's compare of each run, step and rank: the C++ rank<R> dump against the Python rank<R>
dump, every row matched and passed, and in md5 mode every CRC equal (where B's libtorch is this
torch's version; probe_oracle.py's `compare` checks). msprobe's CRCs are taken in its hooks,
as its statistics are (probe_oracle.py's `crcs_at_hook_time`).

Exit status 77 where msprobe is not installed (ctest reports the test skipped).
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_oracle  # noqa: E402  (its MLP, and its compare that checks every row)

STEPS = 2
WORLD = 2
# Each run: its summary_mode and what the debugger is started on: the DDP object (msprobe names
# its modules `Module.module.<path>...`: the wrapper is the root, not dumped, and the model is
# its child `module`) or the model inside it (`Module.<path>...`).
RUNS = {
    "statistics": ("statistics", "ddp"),
    "md5": ("md5", "ddp"),
    "md5_inner": ("md5", "inner"),
}
LAUNCH_TIMEOUT_S = 120


def prepare(d):
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(probe_oracle.MLP().state_dict(), d / "init.pt")
    g = torch.Generator().manual_seed(1)
    torch.save({f"x.{rank}.{step}": torch.randn(5, 4, generator=g)
                for rank in range(WORLD) for step in range(STEPS)}, d / "data.pt")
    for name, (summary_mode, _) in RUNS.items():
        (d / name).mkdir()
        config = {"task": "statistics", "dump_path": str(d / name / "python"), "rank": [],
                  "step": [], "level": "L0", "async_dump": False,
                  "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                 "summary_mode": summary_mode}}
        (d / name / "config.json").write_text(json.dumps(config, indent=1))


def new_debugger(config_path, dump_path):
    """msprobe's PrecisionDebugger is one per process: forgetting the instance lets one launch
    dump every run, each with its own config (a fresh model, DDP and debugger each)."""
    from msprobe.pytorch import PrecisionDebugger
    PrecisionDebugger._instance = None
    return PrecisionDebugger(config_path=str(config_path), dump_path=str(dump_path))


def worker(d):
    """One Python rank: every run of RUNS; tests/probe_ddp_ranks.cpp is its C++ twin."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    d = pathlib.Path(d)
    probe_oracle.crcs_at_hook_time()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = torch.load(d / "data.pt", weights_only=True)
    for name, (_, target) in RUNS.items():
        model = probe_oracle.MLP()
        model.load_state_dict(torch.load(d / "init.pt", weights_only=True))
        ddp = DDP(model)
        debugger = new_debugger(d / name / "config.json", d / name / "python")
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(STEPS):
            debugger.start(ddp if target == "ddp" else model)
            loss = ddp(data[f"x.{rank}.{step}"]).pow(2).mean()
            loss.backward()
            debugger.stop()
            debugger.step()
            # After debugger.step(): msprobe takes md5's CRCs from the live tensors until then.
            opt.step()
            opt.zero_grad()
        dist.barrier()
    dist.destroy_process_group()


def launch(what, command):
    started = time.monotonic()
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        print(f"{what} ranks: no end after {LAUNCH_TIMEOUT_S} s\n{e.output or ''}")
        return False
    print(f"{what} ranks: exit {done.returncode} after {time.monotonic() - started:.1f} s")
    if done.returncode != 0:
        print(done.stdout)
    return done.returncode == 0


def rank_folders(d):
    """Every step folder of every dump must hold rank0 and rank1 only (no proc<pid>)."""
    bad = 0
    expected = [f"rank{r}" for r in range(WORLD)]
    for name in RUNS:
        for side in ("python", "cpp"):
            for step in range(STEPS):
                folder = d / name / side / f"step{step}"
                found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
                if found != expected:
                    print(f"{folder}: {found}, expected {expected}")
                    bad += 1
    return bad


def names_and_ranks(d):
    """What msprobe named (the DDP runs under `Module.module.`), and that the two ranks dumped
    apart: their input CRCs differ, so a C++ rank writing the other's folder cannot pass."""
    bad = 0
    for name, (summary_mode, target) in RUNS.items():
        dumps = [json.loads((d / name / "python" / "step0" / f"rank{r}" / "dump.json").read_text())
                 for r in range(WORLD)]
        first = next(iter(dumps[0]["data"]))
        prefix = "Module.module.fc1.Linear." if target == "ddp" else "Module.fc1.Linear."
        print(f"{name}: msprobe's first entry {first}")
        if not first.startswith(prefix):
            print(f"{name}: msprobe's first entry is not {prefix}forward.0")
            bad += 1
        if summary_mode == "md5":
            crcs = [dump["data"][first]["input_args"][0]["md5"] for dump in dumps]
            if crcs[0] == crcs[1]:
                print(f"{name}: both ranks had the same input")
                bad += 1
    return bad


def run(binary, d):
    try:
        import msprobe  # noqa: F401
        import pandas  # noqa: F401
    except ImportError:
        print("msprobe (mindstudio-probe) is not installed")
        return probe_oracle.SKIP
    d = pathlib.Path(d).resolve()
    prepare(d)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(WORLD)]
    ok = launch("python", torchrun + [os.path.abspath(__file__), "worker", str(d)])
    ok = launch("c++", torchrun + ["--no-python", binary, str(d), *RUNS]) and ok
    if not ok:
        return 1
    bad = rank_folders(d)
    if bad:
        return 1
    bad += names_and_ranks(d)
    libtorch = (d / "libtorch_version").read_text().strip()
    pairs = []
    for run_name in RUNS:
        for step in range(STEPS):
            for rank in range(WORLD):
                pairs += [str(d / run_name / side / f"step{step}" / f"rank{rank}" / "dump.json")
                          for side in ("cpp", "python")]
    started = time.monotonic()
    bad += probe_oracle.compare(libtorch, str(d / "compare"), list(zip(pairs[::2], pairs[1::2])))
    print(f"{len(pairs) // 2} compares in {time.monotonic() - started:.1f} s")
    print("FAILED" if bad else "every rank's dump matched msprobe's")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2]))
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    sys.exit(run(args.binary, args.dir))
