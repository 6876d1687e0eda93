// Cost of running modules through modhooks, each figure beside its baseline from the same run:
//   - Linear(16,16): direct forward / call with no hooks / call with two forward hooks;
//   - 8 x Linear(64,64), batch 32, forward+backward: no hooks / a full backward hook per layer;
//   - a TorchScript module: forward / call with no hooks.
// Python's figures for the same cases come from bench/python_hooks_bench.py (run-bench.sh).
#include <benchmark/benchmark.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "modhooks/modhooks.h"

namespace {

using IValues = std::vector<c10::IValue>;

void BM_Linear16_DirectForward(benchmark::State& state) {
  torch::nn::Linear linear(16, 16);
  auto x = at::randn({1, 16});
  for (auto _ : state) benchmark::DoNotOptimize(linear->forward(x));
}
BENCHMARK(BM_Linear16_DirectForward);

void BM_Linear16_CallNoHooks(benchmark::State& state) {
  torch::nn::Linear linear(16, 16);
  auto x = at::randn({1, 16});
  for (auto _ : state) benchmark::DoNotOptimize(modhooks::call(linear, x));
}
BENCHMARK(BM_Linear16_CallNoHooks);

void BM_Linear16_CallTwoForwardHooks(benchmark::State& state) {
  torch::nn::Linear linear(16, 16);
  auto x = at::randn({1, 16});
  int64_t seen = 0;
  modhooks::ScopedHandle a(modhooks::register_forward_hook(
      linear, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++seen; }));
  modhooks::ScopedHandle b(modhooks::register_forward_hook(
      linear, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++seen; }));
  for (auto _ : state) benchmark::DoNotOptimize(modhooks::call(linear, x));
  benchmark::DoNotOptimize(seen);
}
BENCHMARK(BM_Linear16_CallTwoForwardHooks);

void mlp_forward_backward(benchmark::State& state, bool hooked) {
  modhooks::Sequential mlp;
  std::vector<modhooks::ScopedHandle> handles;
  for (int i = 0; i < 8; ++i) mlp->push_back(torch::nn::Linear(64, 64));
  if (hooked) {
    for (std::size_t i = 0; i < mlp->size(); ++i) {
      handles.emplace_back(modhooks::register_full_backward_hook(
          mlp->ptr(i),
          [](torch::nn::Module&, const modhooks::TensorList&, const modhooks::TensorList&) {}));
    }
  }
  auto x = at::randn({32, 64}).requires_grad_();
  for (auto _ : state) {
    modhooks::call(mlp, x).sum().backward();
  }
}

void BM_MLP8_ForwardBackward_NoHooks(benchmark::State& state) {
  mlp_forward_backward(state, false);
}
BENCHMARK(BM_MLP8_ForwardBackward_NoHooks);

void BM_MLP8_ForwardBackward_FullBackwardHookPerLayer(benchmark::State& state) {
  mlp_forward_backward(state, true);
}
BENCHMARK(BM_MLP8_ForwardBackward_FullBackwardHookPerLayer);

/// A TorchScript module built in C++: x @ w with a 16x16 w.
torch::jit::Module script_linear() {
  torch::jit::Module module("ScriptLinear");
  module.register_parameter("w", at::randn({16, 16}), false);
  module.define("def forward(self, x):\n  return x.mm(self.w)\n");
  return module;
}

void BM_Script_DirectForward(benchmark::State& state) {
  auto module = script_linear();
  std::vector<c10::IValue> inputs{at::randn({1, 16})};
  for (auto _ : state) benchmark::DoNotOptimize(module.forward(inputs));
}
BENCHMARK(BM_Script_DirectForward);

void BM_Script_CallNoHooks(benchmark::State& state) {
  auto module = script_linear();
  std::vector<c10::IValue> inputs{at::randn({1, 16})};
  for (auto _ : state) benchmark::DoNotOptimize(modhooks::call(module, inputs));
}
BENCHMARK(BM_Script_CallNoHooks);

}  // namespace

BENCHMARK_MAIN();
