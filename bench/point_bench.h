// SPDX-License-Identifier: BSD-3-Clause
// The cases of hook points in compiled programs (aoti_bench.cpp: AOTInductor packages,
// executorch_bench.cpp: ExecuTorch programs), each timed in alternation with its baseline in the
// same run. The programs and their inputs are in $MODHOOKS_BENCH_DIR, written by the Python
// script beside each benchmark.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "paired.h"

namespace modhooks_bench {

inline std::string bench_dir() {
  const char* dir = std::getenv("MODHOOKS_BENCH_DIR");
  return dir ? dir : ".";
}

/// The inputs of model `name`, a list of tensors saved with torch.save.
inline std::vector<at::Tensor> inputs(const std::string& name) {
  std::vector<at::Tensor> xs;
  const auto loaded = modhooks::load_object(bench_dir() + "/" + name + ".inputs.pt");
  for (const auto& v : loaded.toListRef()) xs.push_back(v.toTensor());
  return xs;
}

/// The program with points `points` beside the plain one `plain` (file names in the bench
/// folder), neither hooked.
template <class Net>
void with_points(benchmark::State& state, const std::string& name, const std::string& plain_file,
                 const std::string& points_file) {
  Net plain(bench_dir() + "/" + plain_file);
  Net points(bench_dir() + "/" + points_file);
  const auto xs = inputs(name);
  plain.run(xs);  // an untimed run of each first: cache state would decide the first timing
  points.run(xs);
  paired(
      state, 1, [&] { benchmark::DoNotOptimize(plain.run(xs)); },
      [&] { benchmark::DoNotOptimize(points.run(xs)); });
  state.counters["points"] = static_cast<double>(points.points().size());
}

/// One program with a no-op forward hook on every point (and with `pre`, a no-op pre-hook on
/// every point that has inputs) against itself without hooks: the cost of a firing is the
/// difference over the number of points.
template <class Net>
void noop_hooks(benchmark::State& state, const std::string& name, const std::string& file,
                bool pre = false) {
  using Point = std::decay_t<decltype(std::declval<Net&>().point(""))>;
  Net bare(bench_dir() + "/" + file);
  Net hooked(bench_dir() + "/" + file);
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& p : hooked.points()) {
    handles.push_back(modhooks::register_forward_hook(
        hooked.point(p), [](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) {}));
    if (pre && hooked.point(p).has_inputs()) {
      handles.push_back(modhooks::register_forward_pre_hook(
          hooked.point(p), [](const Point&, const std::vector<c10::IValue>&) {}));
    }
  }
  const auto xs = inputs(name);
  bare.run(xs);
  hooked.run(xs);
  paired(
      state, 1, [&] { benchmark::DoNotOptimize(bare.run(xs)); },
      [&] { benchmark::DoNotOptimize(hooked.run(xs)); });
  const double firings = static_cast<double>(hooked.points().size());
  state.counters["firing_ns"] = state.counters["added_us"] * 1000 / firings;
}

}  // namespace modhooks_bench
