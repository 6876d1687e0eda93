# SPDX-License-Identifier: BSD-3-Clause
"""What the parity drivers of modhooks::dist share (ddp_parity.py, fsdp_parity.py): a torchrun
launch, and the verdict over the modes of a run."""
import os
import signal
import subprocess
import sys

TIMEOUT = 600  # seconds, per torchrun


def torchrun(nproc, *cmd):
    """Runs `torchrun --standalone` in a session of its own, killed whole after TIMEOUT."""
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(nproc), *cmd]
    print("+", " ".join(args), flush=True)
    p = subprocess.Popen(args, start_new_session=True)
    try:
        return p.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"timed out after {TIMEOUT} s: {' '.join(args)}", flush=True)
        return 124
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def verdict(modes, compare, py_rc, cpp_rc, label=str):
    """Prints a line per mode, `label(mode)` and "ok" where `compare(mode)` is None, else why it
    failed, then what failed; returns the run's exit status (1 where a mode or a launch failed)."""
    failed = []
    for mode in modes:
        why = compare(mode)
        print(f"mode {label(mode)}: {'ok' if why is None else 'FAILED: ' + why}", flush=True)
        if why is not None:
            failed.append(mode)
    if py_rc or cpp_rc:
        print(f"launch failed: C++ ranks exit {cpp_rc}, Python ranks exit {py_rc} (see 'FAILED' "
              "above for the mode)")
    if failed:
        print(f"{len(failed)} of {len(modes)} modes failed: {', '.join(failed)}")
    return 1 if failed or py_rc or cpp_rc else 0
