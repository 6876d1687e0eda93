// SPDX-License-Identifier: BSD-3-Clause
// Cost of modhooks::grad rewrites on CPU, each beside the plain ATen op it stands for, measured
// in the same run:
//   - as a full backward pre-hook on a module, forward + backward through modhooks::call:
//     grad::zero() vs a hook returning at::zeros_like, grad::scale(s) vs one returning at::mul;
//   - called directly on one gradient: the hook object vs the ATen op alone.
// Sizes: 1Ki and 1Mi float elements.
#include <benchmark/benchmark.h>

#include <ATen/ops/ones.h>
#include <ATen/ops/zeros_like.h>
#include <memory>
#include <vector>

#include "modhooks/core/handle.h"
#include "modhooks/device/grad.h"
#include "modhooks/nn/call.h"
#include "modhooks/register.h"

namespace {

using TensorList = std::vector<at::Tensor>;

/// y = 2x: cheap enough that the hook's rewrite is a visible share of backward.
struct Double : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x * 2; }
};

template <class Hook>
void backward_with_pre_hook(benchmark::State& state, Hook hook) {
  auto m = std::make_shared<Double>();
  modhooks::ScopedHandle handle(modhooks::register_full_backward_pre_hook(m, std::move(hook)));
  at::Tensor x = at::ones({state.range(0)}).set_requires_grad(true);
  for (auto _ : state) {
    modhooks::call(m, x).sum().backward();
    x.mutable_grad().reset();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_Backward_ZeroHook(benchmark::State& state) {
  backward_with_pre_hook(state, modhooks::grad::zero());
}
void BM_Backward_ZerosLikeBaseline(benchmark::State& state) {
  backward_with_pre_hook(state, [](torch::nn::Module&, const TensorList& g) {
    return TensorList{at::zeros_like(g[0])};
  });
}
void BM_Backward_ScaleHook(benchmark::State& state) {
  backward_with_pre_hook(state, modhooks::grad::scale(0.5));
}
void BM_Backward_MulBaseline(benchmark::State& state) {
  backward_with_pre_hook(state, [](torch::nn::Module&, const TensorList& g) {
    return TensorList{at::mul(g[0], 0.5)};
  });
}
BENCHMARK(BM_Backward_ZeroHook)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Backward_ZerosLikeBaseline)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Backward_ScaleHook)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Backward_MulBaseline)->Arg(1 << 10)->Arg(1 << 20);

void BM_Direct_ZeroHook(benchmark::State& state) {
  torch::nn::Module m;
  TensorList g{at::ones({state.range(0)})};
  auto hook = modhooks::grad::zero();
  for (auto _ : state) benchmark::DoNotOptimize(hook(m, g));
}
void BM_Direct_ZerosLike(benchmark::State& state) {
  at::Tensor g = at::ones({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(at::zeros_like(g));
}
void BM_Direct_ScaleHook(benchmark::State& state) {
  torch::nn::Module m;
  TensorList g{at::ones({state.range(0)})};
  auto hook = modhooks::grad::scale(0.5);
  for (auto _ : state) benchmark::DoNotOptimize(hook(m, g));
}
void BM_Direct_Mul(benchmark::State& state) {
  at::Tensor g = at::ones({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(at::mul(g, 0.5));
}
BENCHMARK(BM_Direct_ZeroHook)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Direct_ZerosLike)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Direct_ScaleHook)->Arg(1 << 10)->Arg(1 << 20);
BENCHMARK(BM_Direct_Mul)->Arg(1 << 10)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
