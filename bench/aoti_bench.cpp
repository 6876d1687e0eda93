// SPDX-License-Identifier: BSD-3-Clause
// Hook points inside AOTInductor packages, each case timed in alternation with its baseline in
// the same run: the package with points against the same model compiled without them (no hook
// registered), and a package with no-op hooks against the same package without hooks (the cost
// of a firing). bench/aoti_bench.py writes the packages into $MODHOOKS_BENCH_DIR.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "modhooks/aoti.h"
#include "paired.h"

namespace {

std::string bench_dir() {
  const char* dir = std::getenv("MODHOOKS_BENCH_DIR");
  return dir ? dir : ".";
}

std::vector<at::Tensor> inputs(const std::string& name) {
  std::vector<at::Tensor> xs;
  const auto loaded = modhooks::load_object(bench_dir() + "/" + name + ".inputs.pt");
  for (const auto& v : loaded.toListRef()) xs.push_back(v.toTensor());
  return xs;
}

/// `tag`'s package beside the plain one, neither hooked.
void with_points(benchmark::State& state, const std::string& name, const std::string& tag) {
  modhooks::aoti::Model plain(bench_dir() + "/" + name + ".plain.pt2");
  modhooks::aoti::Model points(bench_dir() + "/" + name + "." + tag + ".pt2");
  const auto xs = inputs(name);
  plain.run(xs);  // an untimed run of each first: cache state would decide the first timing
  points.run(xs);
  modhooks_bench::paired(
      state, 1, [&] { benchmark::DoNotOptimize(plain.run(xs)); },
      [&] { benchmark::DoNotOptimize(points.run(xs)); });
  state.counters["points"] = static_cast<double>(points.points().size());
}

/// One package with a no-op forward hook on every point (and with `pre`, a no-op pre-hook on
/// every point that has inputs) against itself without hooks: the cost of a firing is the
/// difference over the number of points.
void noop_hooks(benchmark::State& state, const std::string& name, const std::string& tag,
                bool pre = false) {
  modhooks::aoti::Model bare(bench_dir() + "/" + name + "." + tag + ".pt2");
  modhooks::aoti::Model hooked(bench_dir() + "/" + name + "." + tag + ".pt2");
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& p : hooked.points()) {
    handles.push_back(modhooks::register_forward_hook(
        hooked.point(p),
        [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {}));
    if (pre && hooked.point(p).has_inputs()) {
      handles.push_back(modhooks::register_forward_pre_hook(
          hooked.point(p), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&) {}));
    }
  }
  const auto xs = inputs(name);
  bare.run(xs);
  hooked.run(xs);
  modhooks_bench::paired(
      state, 1, [&] { benchmark::DoNotOptimize(bare.run(xs)); },
      [&] { benchmark::DoNotOptimize(hooked.run(xs)); });
  const double firings = static_cast<double>(hooked.points().size());
  state.counters["firing_ns"] = state.counters["added_us"] * 1000 / firings;
}

void BM_Resnet18BlockPointsNoHooks(benchmark::State& s) { with_points(s, "resnet18", "blocks"); }
void BM_Resnet18EveryPointNoHooks(benchmark::State& s) { with_points(s, "resnet18", "all"); }
void BM_BertLayerPointsNoHooks(benchmark::State& s) { with_points(s, "bert", "layers"); }
void BM_TinyLinearPointsNoHooks(benchmark::State& s) { with_points(s, "tiny", "linears"); }
void BM_Resnet18BlockNoopHooks(benchmark::State& s) { noop_hooks(s, "resnet18", "blocks"); }
void BM_TinyLinearNoopHooks(benchmark::State& s) { noop_hooks(s, "tiny", "linears"); }
void BM_TanhChainNoopHooks(benchmark::State& s) { noop_hooks(s, "chain", "tanhs"); }
void BM_TinyLinearInputsNoopForwardHooks(benchmark::State& s) {
  noop_hooks(s, "tiny", "linears_inputs");
}
void BM_TinyLinearInputsNoopPreAndForwardHooks(benchmark::State& s) {
  noop_hooks(s, "tiny", "linears_inputs", true);
}

BENCHMARK(BM_Resnet18BlockPointsNoHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Resnet18EveryPointNoHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BertLayerPointsNoHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TinyLinearPointsNoHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Resnet18BlockNoopHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TinyLinearNoopHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TanhChainNoopHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TinyLinearInputsNoopForwardHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TinyLinearInputsNoopPreAndForwardHooks)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
