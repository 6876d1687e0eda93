// Cost of hooks on the inner submodules of a TorchScript model. A model of 8 layers
// (relu(x @ w), w 64x64, batch 8) is built three times, so that each case runs on code of its
// own, and every case is timed in alternation with the untouched model's `forward` in the same
// run:
//   - the model after `instrument` (every call site rewritten) with no hook registered;
//   - one no-op forward hook on layer 3, the model run by `forward`;
//   - one no-op forward hook on the root, the model run by `modhooks::call` (the top-level
//     hooked call that an inner one is compared with).
#include <benchmark/benchmark.h>
#include <torch/csrc/jit/api/module.h>

#include <chrono>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

namespace {

using IValues = std::vector<c10::IValue>;
using Clock = std::chrono::steady_clock;
constexpr int kLayers = 8;
constexpr int kBatch = 16;  // forwards per timed batch

/// Root and layers defined in C++; `self.lK.forward(x)` compiles to the same
/// `prim::CallMethod` a scripted or traced model has.
torch::jit::Module model() {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module root("Net", cu);
  std::string body = "def forward(self, x):\n";
  for (int i = 0; i < kLayers; ++i) {
    const std::string index = std::to_string(i);
    torch::jit::Module layer(std::string("Layer").append(index), cu);
    layer.register_parameter("w", at::randn({64, 64}) / 8, false);
    layer.define("def forward(self, x):\n  return torch.relu(x.mm(self.w))\n");
    root.register_module(std::string("l").append(index), layer);
    body.append("  x = self.l").append(index).append(".forward(x)\n");
  }
  root.define(body + "  return x\n");
  return root;
}

template <class Baseline, class Measured>
void paired(benchmark::State& state, Baseline&& baseline, Measured&& measured) {
  double baseline_s = 0, measured_s = 0;
  bool baseline_first = true;
  auto timed = [](auto& f) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) f();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  for (auto _ : state) {
    if (baseline_first) {
      baseline_s += timed(baseline);
      measured_s += timed(measured);
    } else {
      measured_s += timed(measured);
      baseline_s += timed(baseline);
    }
    baseline_first = !baseline_first;
  }
  const double per_call = 1e6 / (static_cast<double>(state.iterations()) * kBatch);
  state.counters["baseline_us"] = baseline_s * per_call;
  state.counters["measured_us"] = measured_s * per_call;
  state.counters["added_us"] = (measured_s - baseline_s) * per_call;
  state.counters["added_pct"] = 100 * (measured_s / baseline_s - 1);
}

void BM_Script8_InstrumentedNoHooks_vs_Original(benchmark::State& state) {
  auto original = model();
  auto instrumented = model();
  modhooks::instrument(instrumented);
  IValues x{at::randn({8, 64})};
  paired(
      state, [&] { benchmark::DoNotOptimize(original.forward(x)); },
      [&] { benchmark::DoNotOptimize(instrumented.forward(x)); });
}
BENCHMARK(BM_Script8_InstrumentedNoHooks_vs_Original);

void BM_Script8_OneInnerHook_vs_Original(benchmark::State& state) {
  auto original = model();
  auto hooked = model();
  int64_t seen = 0;
  modhooks::ScopedHandle h(modhooks::register_forward_hook(
      modhooks::submodule(hooked, "l3"),
      [&](torch::jit::Module&, const IValues&, const c10::IValue&) { ++seen; }));
  IValues x{at::randn({8, 64})};
  paired(
      state, [&] { benchmark::DoNotOptimize(original.forward(x)); },
      [&] { benchmark::DoNotOptimize(hooked.forward(x)); });
  benchmark::DoNotOptimize(seen);
}
BENCHMARK(BM_Script8_OneInnerHook_vs_Original);

void BM_Script8_OneTopLevelHook_vs_Original(benchmark::State& state) {
  auto original = model();
  auto hooked = model();
  int64_t seen = 0;
  modhooks::ScopedHandle h(modhooks::register_forward_hook(
      hooked, [&](torch::jit::Module&, const IValues&, const c10::IValue&) { ++seen; }));
  IValues x{at::randn({8, 64})};
  paired(
      state, [&] { benchmark::DoNotOptimize(original.forward(x)); },
      [&] { benchmark::DoNotOptimize(modhooks::call(hooked, x)); });
  benchmark::DoNotOptimize(seen);
}
BENCHMARK(BM_Script8_OneTopLevelHook_vs_Original);

}  // namespace

BENCHMARK_MAIN();
