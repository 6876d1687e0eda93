// SPDX-License-Identifier: BSD-3-Clause
// Times a benchmark case in alternation with its baseline in the same run.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace modhooks_bench {

/// Runs `baseline` and `measured` (each a batch of `calls` calls) once per iteration, in
/// alternating order, and reports the mean microseconds per call of each and the difference
/// (`added_us`), and the median over iterations of what one measured batch took more than the
/// baseline batch beside it (`added_median_us`). A few slow batches (an interrupt, a neighbour on
/// the VM) move the mean difference by more than a few nanoseconds per call on a layer of some
/// microseconds; they move the median little.
template <class Baseline, class Measured>
void paired(benchmark::State& state, int calls, Baseline&& baseline, Measured&& measured) {
  double baseline_s = 0, measured_s = 0;
  std::vector<double> added_s;  // per iteration
  bool baseline_first = true;
  auto timed = [](auto& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (auto _ : state) {
    double b = 0, m = 0;
    if (baseline_first) {
      b = timed(baseline);
      m = timed(measured);
    } else {
      m = timed(measured);
      b = timed(baseline);
    }
    baseline_s += b;
    measured_s += m;
    added_s.push_back(m - b);
    baseline_first = !baseline_first;
  }
  const double per_call = 1e6 / (static_cast<double>(state.iterations()) * calls);
  state.counters["baseline_us"] = baseline_s * per_call;
  state.counters["measured_us"] = measured_s * per_call;
  state.counters["added_us"] = (measured_s - baseline_s) * per_call;
  state.counters["added_pct"] = 100 * (measured_s / baseline_s - 1);
  if (!added_s.empty()) {
    auto middle = added_s.begin() + static_cast<std::ptrdiff_t>(added_s.size() / 2);
    std::nth_element(added_s.begin(), middle, added_s.end());
    state.counters["added_median_us"] = *middle * 1e6 / calls;
  }
}

/// `paired` over batches of `Calls` calls of `baseline` and of `measured`, their results kept
/// from the optimizer.
template <int Calls, class Baseline, class Measured>
void paired_batches(benchmark::State& state, Baseline&& baseline, Measured&& measured) {
  paired(
      state, Calls,
      [&] {
        for (int i = 0; i < Calls; ++i) benchmark::DoNotOptimize(baseline());
      },
      [&] {
        for (int i = 0; i < Calls; ++i) benchmark::DoNotOptimize(measured());
      });
}

/// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"), or 0 where there is none.
inline std::int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field) + 1));
  }
  return 0;
}

/// The peak resident memory `f` adds, in KiB: the high-water mark (Linux's VmHWM, reset through
/// /proc/self/clear_refs before `f`) less the resident set before it.
inline std::int64_t peak_extra_kb(const std::function<void()>& f) {
  const std::int64_t before = status_kb("VmRSS:");
  std::ofstream("/proc/self/clear_refs") << "5";
  f();
  return status_kb("VmHWM:") - before;
}

}  // namespace modhooks_bench
