# SPDX-License-Identifier: BSD-3-Clause
"""Python's figures for the cases of bench/state_bench.cpp, measured on the same machine.

Prints milliseconds per call (median of 5 repeats, 3 for the slowest) for: state_dict() and load_state_dict() of
5000 x Linear(4,4), beside Python's own named_parameters() + copy_ loop; load_state_dict() of a
512 MiB model (8 x Linear(4096,4096)) beside the copy_ loop, as GB/s; the peak memory each
load_state_dict adds beside the model; and torch.load of a 512 MiB
torch.save file. That file is written to the path given as the first argument when it is not
there yet, and state_bench.cpp loads the same file.
"""
import pathlib
import statistics
import sys
import timeit

import torch
from torch import nn

torch.set_num_threads(1)


def per_call_ms(fn, number, repeat=5):
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e3


def fresh_values(model):
    return {k: torch.randn_like(v) for k, v in model.state_dict().items()}


def copy_loop(model, source):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(source[name])


def status_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def peak_extra_mib(fn):
    """The peak resident memory fn adds, in MiB: VmHWM (reset through /proc/self/clear_refs
    before it) less the resident set before it, as bench/paired.h measures the C++ side."""
    before = status_kb("VmRSS:")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    fn()
    return (status_kb("VmHWM:") - before) / 1024


def main(checkpoint: pathlib.Path):
    many = nn.ModuleList([nn.Linear(4, 4) for _ in range(5000)])
    source = fresh_values(many)
    state_dict = per_call_ms(many.state_dict, 5)
    loop = per_call_ms(lambda: copy_loop(many, source), 5)
    load = per_call_ms(lambda: many.load_state_dict(source), 1, repeat=3)  # seconds per call
    print(f"python 5000 x Linear(4,4) state_dict():        {state_dict:9.2f} ms")
    print(f"python 5000 x Linear(4,4) copy_ loop:          {loop:9.2f} ms")
    print(f"python 5000 x Linear(4,4) load_state_dict():   {load:9.2f} ms  "
          f"({load / loop:.1f}x the loop, "
          f"{peak_extra_mib(lambda: many.load_state_dict(source)):.1f} MiB peak beside the model)")

    torch.manual_seed(0)
    big = nn.ModuleList([nn.Linear(4096, 4096) for _ in range(8)])
    nbytes = sum(t.numel() * t.element_size() for t in big.state_dict().values())
    source = fresh_values(big)
    loop = per_call_ms(lambda: copy_loop(big, source), 2)
    load = per_call_ms(lambda: big.load_state_dict(source), 2)
    print(f"python 512 MiB copy_ loop:                     {loop:9.2f} ms  "
          f"({nbytes / loop / 1e6:.2f} GB/s)")
    print(f"python 512 MiB load_state_dict():              {load:9.2f} ms  "
          f"({nbytes / load / 1e6:.2f} GB/s, "
          f"{peak_extra_mib(lambda: big.load_state_dict(source)):.1f} MiB peak beside the model)")

    if not checkpoint.exists():
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save(big.state_dict(), checkpoint)
    torch.load(checkpoint, weights_only=True)  # warms the page cache, as for the C++ side
    read = per_call_ms(lambda: torch.load(checkpoint, weights_only=True), 1)
    print(f"python torch.load of the 512 MiB file:         {read:9.2f} ms  "
          f"({nbytes / read / 1e6:.2f} GB/s)")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
