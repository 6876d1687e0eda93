"""Python's figures for the cases of bench/call_bench.cpp, measured on the same machine.

Prints microseconds per iteration (median of 5 repeats) for: Linear(16,16) called directly with
no hooks and with two forward hooks, and 8 x Linear(64,64), batch 32, forward+backward with and
without a full backward hook on every layer.
"""
import statistics
import timeit

import torch
from torch import nn

torch.set_num_threads(1)


def per_call_us(fn, number):
    runs = timeit.repeat(fn, number=number, repeat=5)
    return statistics.median(runs) / number * 1e6


def main():
    linear = nn.Linear(16, 16)
    x = torch.randn(1, 16)
    no_hooks = per_call_us(lambda: linear(x), 20000)
    seen = []
    handles = [linear.register_forward_hook(lambda m, a, o: seen.append(1)) for _ in range(2)]
    two_hooks = per_call_us(lambda: linear(x), 20000)
    for h in handles:
        h.remove()

    mlp = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    xb = torch.randn(32, 64, requires_grad=True)
    step = lambda: mlp(xb).sum().backward()
    plain = per_call_us(step, 300)
    handles = [m.register_full_backward_hook(lambda m, gi, go: None) for m in mlp]
    hooked = per_call_us(step, 300)
    for h in handles:
        h.remove()

    print(f"python Linear16 call, no hooks:        {no_hooks:8.2f} us")
    print(f"python Linear16 call, two fwd hooks:   {two_hooks:8.2f} us  "
          f"(+{two_hooks - no_hooks:.2f} us)")
    print(f"python MLP8 fwd+bwd, no hooks:         {plain:8.2f} us")
    print(f"python MLP8 fwd+bwd, full hook/layer:  {hooked:8.2f} us  "
          f"(+{(hooked / plain - 1) * 100:.1f}%)")


if __name__ == "__main__":
    main()
