// SPDX-License-Identifier: BSD-3-Clause
// Hook points inside ExecuTorch programs, each case timed in alternation with its baseline in the
// same run: the program with points against the same model written without them (no hook
// registered), with ExecuTorch's kernels and with XNNPACK, and a program with no-op hooks against
// the same program without hooks (the cost of a firing). bench/executorch_bench.py writes the
// programs into $MODHOOKS_BENCH_DIR.
#include <benchmark/benchmark.h>

#include <string>

#include "modhooks/executorch.h"
#include "point_bench.h"

namespace {

using modhooks::executorch::Program;

void with_points(benchmark::State& state, const std::string& name, const std::string& tag,
                 const std::string& suffix = "") {
  modhooks_bench::with_points<Program>(state, name, name + ".plain" + suffix + ".pte",
                                       name + "." + tag + suffix + ".pte");
}

void noop_hooks(benchmark::State& state, const std::string& name, const std::string& tag,
                const std::string& suffix = "") {
  modhooks_bench::noop_hooks<Program>(state, name, name + "." + tag + suffix + ".pte");
}

void BM_Resnet18BlockPointsNoHooks(benchmark::State& s) {
  with_points(s, "pte_resnet18", "blocks");
}
void BM_Resnet18BlockPointsNoHooksXnnpack(benchmark::State& s) {
  with_points(s, "pte_resnet18", "blocks", "_xnnpack");
}
void BM_Resnet18BlockNoopHooksXnnpack(benchmark::State& s) {
  noop_hooks(s, "pte_resnet18", "blocks", "_xnnpack");
}
void BM_TanhChainPointsNoHooks(benchmark::State& s) { with_points(s, "pte_chain", "tanhs"); }
void BM_TanhChainNoopHooks(benchmark::State& s) { noop_hooks(s, "pte_chain", "tanhs"); }

// ExecuTorch's own convolution kernels take about half a second for a run of resnet18.
BENCHMARK(BM_Resnet18BlockPointsNoHooks)->Unit(benchmark::kMillisecond)->Iterations(6);
BENCHMARK(BM_Resnet18BlockPointsNoHooksXnnpack)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Resnet18BlockNoopHooksXnnpack)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TanhChainPointsNoHooks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TanhChainNoopHooks)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
