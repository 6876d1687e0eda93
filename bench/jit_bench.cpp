// SPDX-License-Identifier: BSD-3-Clause
// Cost of hooks on the inner submodules of a TorchScript model. A model of 8 layers
// (relu(x @ w), w 64x64, batch 8) is built three times, so that each case runs on code of its
// own, and every case is timed in alternation with the untouched model's `forward` in the same
// run:
//   - the model after `instrument` (every call site rewritten) with no hook registered;
//   - one no-op forward hook on layer 3, the model run by `forward`;
//   - a no-op forward pre-hook and forward hook on layer 3, the model run by `forward`;
//   - one no-op forward hook on the root, the model run by `modhooks::call` (the top-level
//     hooked call that an inner one is compared with).
#include <benchmark/benchmark.h>
#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "paired.h"

namespace {

using IValues = std::vector<c10::IValue>;
using modhooks_bench::paired;
constexpr int kLayers = 8;

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

/// One timed call of `model.forward(x)`.
auto forward_of(torch::jit::Module& model, const IValues& x) {
  return [&model, &x] { benchmark::DoNotOptimize(model.forward(x)); };
}

void BM_Script8_InstrumentedNoHooks_vs_Original(benchmark::State& state) {
  auto original = model();
  auto instrumented = model();
  modhooks::instrument(instrumented);
  IValues x{at::randn({8, 64})};
  paired(state, 1, forward_of(original, x), forward_of(instrumented, x));
}
BENCHMARK(BM_Script8_InstrumentedNoHooks_vs_Original);

using Handles = std::vector<modhooks::ScopedHandle>;

/// Times a second copy of the model, with the hooks `add_hooks(hooked, seen)` registers held
/// while it runs, in alternation with the untouched model's `forward`. The hooked copy runs by
/// `forward`, or by `modhooks::call` where `via_call`.
template <class AddHooks>
void hooked_vs_original(benchmark::State& state, AddHooks&& add_hooks, bool via_call = false) {
  auto original = model();
  auto hooked = model();
  int64_t seen = 0;
  const Handles handles = add_hooks(hooked, seen);
  IValues x{at::randn({8, 64})};
  if (via_call) {
    paired(state, 1, forward_of(original, x),
           [&] { benchmark::DoNotOptimize(modhooks::call(hooked, x)); });
  } else {
    paired(state, 1, forward_of(original, x), forward_of(hooked, x));
  }
  benchmark::DoNotOptimize(seen);
}

/// A no-op forward hook that counts its calls in `seen`.
auto counting(int64_t& seen) {
  return [&seen](torch::jit::Module&, const IValues&, const c10::IValue&) { ++seen; };
}

void BM_Script8_OneInnerHook_vs_Original(benchmark::State& state) {
  hooked_vs_original(state, [](torch::jit::Module& hooked, int64_t& seen) {
    Handles handles;
    handles.emplace_back(
        modhooks::register_forward_hook(modhooks::submodule(hooked, "l3"), counting(seen)));
    return handles;
  });
}
BENCHMARK(BM_Script8_OneInnerHook_vs_Original);

void BM_Script8_InnerPreAndForwardHook_vs_Original(benchmark::State& state) {
  hooked_vs_original(state, [](torch::jit::Module& hooked, int64_t& seen) {
    const torch::jit::Module layer = modhooks::submodule(hooked, "l3");
    Handles handles;
    handles.emplace_back(modhooks::register_forward_pre_hook(
        layer, [&seen](torch::jit::Module&, const IValues&) { ++seen; }));
    handles.emplace_back(modhooks::register_forward_hook(layer, counting(seen)));
    return handles;
  });
}
BENCHMARK(BM_Script8_InnerPreAndForwardHook_vs_Original);

void BM_Script8_OneTopLevelHook_vs_Original(benchmark::State& state) {
  hooked_vs_original(
      state,
      [](torch::jit::Module& hooked, int64_t& seen) {
        Handles handles;
        handles.emplace_back(modhooks::register_forward_hook(hooked, counting(seen)));
        return handles;
      },
      /*via_call=*/true);
}
BENCHMARK(BM_Script8_OneTopLevelHook_vs_Original);

}  // namespace

BENCHMARK_MAIN();
