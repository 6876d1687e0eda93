// SPDX-License-Identifier: BSD-3-Clause
// Hook points inside AOTInductor packages, each case timed in alternation with its baseline in
// the same run: the package with points against the same model compiled without them (no hook
// registered), and a package with no-op hooks against the same package without hooks (the cost
// of a firing). bench/aoti_bench.py writes the packages into $MODHOOKS_BENCH_DIR.
#include <benchmark/benchmark.h>

#include <string>

#include "modhooks/aoti.h"
#include "point_bench.h"

namespace {

using modhooks::aoti::Model;

/// `tag`'s package beside the plain one, neither hooked.
void with_points(benchmark::State& state, const std::string& name, const std::string& tag) {
  modhooks_bench::with_points<Model>(state, name, name + ".plain.pt2", name + "." + tag + ".pt2");
}

/// `tag`'s package with no-op hooks beside itself without.
void noop_hooks(benchmark::State& state, const std::string& name, const std::string& tag,
                bool pre = false) {
  modhooks_bench::noop_hooks<Model>(state, name, name + "." + tag + ".pt2", pre);
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
