# SPDX-License-Identifier: BSD-3-Clause
"""Python's figures for bench/model_io_bench.cpp, on the files it wrote (run it first).

Loads model_io_1GiB.safetensors with safetensors.torch.load_model and model_io_1GiB.pt with
torch.load(mmap=True) + load_state_dict into an existing model of the same 16 float32 [4096, 4096]
parameters, each timed in alternation with a baseline of the same run: copy_ of 1 GiB from a
tensor of the file's bytes already in memory into the model's parameters. Prints milliseconds
per call (median of 5 of each). The first argument is the folder holding the files.
"""
import pathlib
import statistics
import sys
import time

import torch
from safetensors.torch import load_model

torch.set_num_threads(1)


def model():
    m = torch.nn.Module()
    for i in range(16):
        m.register_parameter(f"w{i}", torch.nn.Parameter(torch.zeros(4096, 4096)))
    return m


def paired(baseline, measured, repeat=5):
    b, m = [], []
    for i in range(repeat):
        for fn, out in ((baseline, b), (measured, m)) if i % 2 == 0 else ((measured, m), (baseline, b)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(b) * 1e3, statistics.median(m) * 1e3


def main(folder: pathlib.Path):
    net = model()
    source = {k: torch.full_like(v, 1.5) for k, v in net.state_dict().items()}

    def copy_loop():
        with torch.no_grad():
            for name, p in net.named_parameters():
                p.copy_(source[name])

    st = str(folder / "model_io_1GiB.safetensors")
    pt = str(folder / "model_io_1GiB.pt")
    for path in (st, pt):  # warm the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    base, meas = paired(copy_loop, lambda: load_model(net, st))
    print(f"python safetensors.torch.load_model 1 GiB:         {meas:9.1f} ms  (copy_ loop {base:.1f} ms)")
    base, meas = paired(copy_loop,
                        lambda: net.load_state_dict(torch.load(pt, mmap=True, weights_only=True)))
    print(f"python torch.load(mmap=True) + load_state_dict:    {meas:9.1f} ms  (copy_ loop {base:.1f} ms)")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
