# SPDX-License-Identifier: BSD-3-Clause
"""Python's figures for the cases of bench/call_bench.cpp, measured the same way on the same machine.

Like call_bench.cpp, each case is timed beside its baseline in alternation (the order flips every
round), and the mean microseconds per call of both and their difference are printed:
Linear(16,16) called with no hooks vs with two forward hooks; 8 x Linear(64,64), batch 32,
forward+backward with no hooks vs a full backward hook on every layer.
"""
import time

import torch
from torch import nn

torch.set_num_threads(1)


def paired(baseline, measured, calls, seconds=3.0):
    """Mean microseconds per call of `baseline` and `measured`, each a batch of `calls` calls."""
    spent = [0.0, 0.0]
    rounds = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or rounds < 10:
        order = (0, 1) if rounds % 2 == 0 else (1, 0)
        for which in order:
            fn = (baseline, measured)[which]
            t = time.perf_counter()
            fn()
            spent[which] += time.perf_counter() - t
        rounds += 1
    return [s / (rounds * calls) * 1e6 for s in spent]


def report(name, baseline, measured):
    print(f"python {name}: {baseline:9.2f} us -> {measured:9.2f} us  "
          f"(+{measured - baseline:.2f} us, +{(measured / baseline - 1) * 100:.1f}%)")


def main():
    calls = 64
    plain_linear = nn.Linear(16, 16)
    hooked_linear = nn.Linear(16, 16)
    seen = []
    for _ in range(2):
        hooked_linear.register_forward_hook(lambda m, a, o: seen.append(1))
    x = torch.randn(1, 16)

    def batch(module):
        def run():
            for _ in range(calls):
                module(x)
            seen.clear()
        return run

    report("Linear16, no hooks vs two forward hooks        ",
           *paired(batch(plain_linear), batch(hooked_linear), calls))

    plain = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    hooked = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    for layer in hooked:
        layer.register_full_backward_hook(lambda m, gi, go: None)
    xb = torch.randn(32, 64, requires_grad=True)
    report("MLP8 fwd+bwd, no hooks vs full hook per layer ",
           *paired(lambda: plain(xb).sum().backward(), lambda: hooked(xb).sum().backward(), 1))


if __name__ == "__main__":
    main()
