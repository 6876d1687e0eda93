// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the step benchmarks share (ddp_step_bench, fsdp_step_bench, probe_step_bench): a step
// timed beside its baseline in alternating blocks, and the median over the rounds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace bench {

/// The median of `values` (the mean of the middle two for an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Milliseconds per step of `baseline` and of `measured` in each of `rounds` rounds, after one
/// warm-up round: each round times `steps` steps of one, then of the other, the order flipping
/// each round; `sync()` runs before each block (ranks start it together; a no-op in one process).
template <class Baseline, class Measured, class Sync>
std::pair<std::vector<double>, std::vector<double>> alternate(Baseline& baseline,
                                                              Measured& measured, int steps,
                                                              int rounds, Sync&& sync) {
  auto timed = [steps](auto& step) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const std::chrono::duration<double, std::milli> spent =
        std::chrono::steady_clock::now() - start;
    return spent.count() / steps;
  };
  std::vector<double> baseline_ms, measured_ms;
  for (int round = -1; round < rounds; ++round) {
    sync();
    double b = 0, m = 0;
    if (round % 2 == 0) {
      b = timed(baseline);
      sync();
      m = timed(measured);
    } else {
      m = timed(measured);
      sync();
      b = timed(baseline);
    }
    if (round < 0) continue;  // warm-up: allocators, optimizer state, lazy initialisations
    baseline_ms.push_back(b);
    measured_ms.push_back(m);
  }
  return {baseline_ms, measured_ms};
}

}  // namespace bench
