# SPDX-License-Identifier: BSD-3-Clause
"""Python's side of bench/nn_utils_bench.cpp: a forward (training mode, grad on) of the same
layers with torch.nn.utils' weight_norm and spectral_norm, timed in alternation with the same
math written by hand in forward, and a served forward (eval mode, no grad) timed in alternation
with the same Linear without the utility; one thread, medians of 5 repetitions."""
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

warnings.filterwarnings("ignore", category=FutureWarning)
torch.set_num_threads(1)
CALLS = 16


class HandWeightNorm(nn.Module):
    def __init__(self, layer, op):
        super().__init__()
        self.g = nn.Parameter(torch.norm_except_dim(layer.weight, 2, 0).detach())
        self.v = nn.Parameter(layer.weight.detach().clone())
        self.b = nn.Parameter(layer.bias.detach().clone())
        self.op = op

    def forward(self, x):
        return self.op(x, torch._weight_norm(self.v, self.g, 0), self.b)


class HandSpectralNorm(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.w = nn.Parameter(layer.weight.detach().clone())
        self.b = nn.Parameter(layer.bias.detach().clone())
        self.register_buffer("u", F.normalize(torch.randn(self.w.size(0)), dim=0))
        self.register_buffer("v", F.normalize(torch.randn(self.w.size(1)), dim=0))

    def forward(self, x):
        with torch.no_grad():
            F.normalize(torch.mv(self.w.t(), self.u), dim=0, eps=1e-12, out=self.v)
            F.normalize(torch.mv(self.w, self.v), dim=0, eps=1e-12, out=self.u)
            u, v = self.u.clone(), self.v.clone()
        return F.linear(x, self.w / torch.dot(u, torch.mv(self.w, v)), self.b)


def paired(baseline, measured, seconds=1.0):
    times = {"baseline": 0.0, "measured": 0.0}
    order = [("baseline", baseline), ("measured", measured)]
    n = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for name, f in order:
            start = time.perf_counter()
            for _ in range(CALLS):
                f()
            times[name] += time.perf_counter() - start
        order.reverse()
        n += CALLS
    return times["baseline"] / n * 1e6, times["measured"] / n * 1e6


def case(name, hand, layer, x):
    runs = [paired(lambda: hand(x), lambda: layer(x)) for _ in range(5)]
    base = statistics.median(r[0] for r in runs)
    meas = statistics.median(r[1] for r in runs)
    print(f"python {name}: by hand {base:.2f} us, torch.nn.utils {meas:.2f} us "
          f"({100 * (meas / base - 1):+.1f}%)")


def served(name, apply):
    """A served layer (eval mode, no grad) against the same Linear without the utility."""
    plain = nn.Linear(256, 256).eval()
    layer = apply(nn.Linear(256, 256)).eval()
    x = torch.randn(32, 256)
    with torch.no_grad():
        runs = [paired(lambda: plain(x), lambda: layer(x)) for _ in range(5)]
    base = statistics.median(r[0] for r in runs)
    meas = statistics.median(r[1] for r in runs)
    print(f"python served {name}: plain {base:.2f} us, torch.nn.utils {meas:.2f} us "
          f"({100 * (meas / base - 1):+.1f}%)")


def main():
    lin = nn.Linear(256, 256)
    case("weight_norm Linear(256,256)", HandWeightNorm(lin, F.linear),
         torch.nn.utils.weight_norm(lin), torch.randn(32, 256))
    conv = nn.Conv1d(64, 64, 3)
    case("weight_norm Conv1d(64,64,3)", HandWeightNorm(conv, F.conv1d),
         torch.nn.utils.weight_norm(conv), torch.randn(8, 64, 128))
    lin = nn.Linear(256, 256)
    case("spectral_norm Linear(256,256)", HandSpectralNorm(lin), torch.nn.utils.spectral_norm(lin),
         torch.randn(32, 256))
    served("weight_norm Linear(256,256)", torch.nn.utils.weight_norm)
    served("spectral_norm Linear(256,256)", torch.nn.utils.spectral_norm)


if __name__ == "__main__":
    main()
