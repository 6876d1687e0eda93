// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the step benchmarks of modhooks::dist share (ddp_step_bench, fsdp_step_bench): a step
// timed beside its baseline in alternating blocks that every rank starts together, and the
// median over the rounds; how a rank starts.
#pragma once

#include <modhooks/dist.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace bench {

/// A rank's start: `<program> <steps> <rounds>` read (nothing else is accepted: a usage line
/// and exit 2), one intra-op thread (the ranks share the machine's cores; the Python ranks are
/// set the same way), the default group over gloo from torchrun's environment.
inline std::pair<int, int> start(int argc, char** argv, const char* program) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <steps> <rounds>\n", program);
    std::exit(2);
  }
  torch::set_num_threads(1);
  modhooks::dist::init_process_group(modhooks::dist::InitOptions().backend("gloo"));
  return {std::atoi(argv[1]), std::atoi(argv[2])};
}

/// The median of `values` (the mean of the middle two for an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Milliseconds per step of `baseline` and of `measured` in each of `rounds` rounds, after one
/// warm-up round: each round times `steps` steps of one, then of the other, the order flipping
/// each round. All ranks start each block together, so that a block does not time another
/// rank's lateness from the block before.
template <class Baseline, class Measured>
std::pair<std::vector<double>, std::vector<double>> alternate(Baseline& baseline,
                                                              Measured& measured, int steps,
                                                              int rounds) {
  auto timed = [steps](auto& step) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const std::chrono::duration<double, std::milli> spent =
        std::chrono::steady_clock::now() - start;
    return spent.count() / steps;
  };
  std::vector<double> baseline_ms, measured_ms;
  for (int round = -1; round < rounds; ++round) {
    modhooks::dist::barrier();
    double b = 0, m = 0;
    if (round % 2 == 0) {
      b = timed(baseline);
      modhooks::dist::barrier();
      m = timed(measured);
    } else {
      m = timed(measured);
      modhooks::dist::barrier();
      b = timed(baseline);
    }
    if (round < 0) continue;  // warm-up: allocators, optimizer state, lazy initialisations
    baseline_ms.push_back(b);
    measured_ms.push_back(m);
  }
  return {baseline_ms, measured_ms};
}

}  // namespace bench
