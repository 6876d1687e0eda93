// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The counter of live CPU allocator bytes that bench/cpu_memory.cpp installs when it loads, for
// the benchmarks that link it (fsdp_step_bench, probe_write_bench).
#pragma once

#include <cstdint>
#include <utility>

namespace modhooks_bench {

/// Bytes of CPU storage allocated since the library loaded and not freed.
int64_t cpu_live();
/// The most `cpu_live()` has been since the last `reset_cpu_peak()` (or the load).
int64_t cpu_peak();
/// Starts a new peak at the bytes live now.
void reset_cpu_peak();

/// Peak live bytes while `f` runs, minus those live before.
template <class F>
int64_t peak_beside(F&& f) {
  const int64_t before = cpu_live();
  reset_cpu_peak();
  std::forward<F>(f)();
  return cpu_peak() - before;
}

}  // namespace modhooks_bench
