// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the step benchmarks of modhooks::dist share (ddp_step_bench, fsdp_step_bench): a step
// timed beside its baseline in alternating blocks that every rank starts together
// (alternate.h's timing), and how a rank starts.
#pragma once

#include <modhooks/dist.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "alternate.h"

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

/// `alternate` across ranks: every block starts on all ranks together, so that a block does not
/// time another rank's lateness from the block before.
template <class Baseline, class Measured>
std::pair<std::vector<double>, std::vector<double>> alternate(Baseline& baseline,
                                                              Measured& measured, int steps,
                                                              int rounds) {
  return alternate(baseline, measured, steps, rounds, [] { modhooks::dist::barrier(); });
}

}  // namespace bench
