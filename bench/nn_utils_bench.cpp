// SPDX-License-Identifier: BSD-3-Clause
// What the nn utilities cost on a forward (training mode, grad on), each timed in alternation
// with its baseline in the same run: the layer with modhooks' utility, run through
// modhooks::call, against a module whose own forward does the same math by hand.
//   - weight_norm on Linear(256, 256), batch 32, and on Conv1d(64, 64, 3) over 8 x 64 x 128;
//   - spectral_norm (one power-iteration step per forward) on Linear(256, 256), batch 32;
// and, for a served model (eval mode, no grad), weight_norm and spectral_norm on Linear(256, 256)
// against the same Linear without the utility, both through modhooks::call: outside a
// `parametrize::Cached` scope (the utility computes at each forward, as Python's), and inside one
// (computed once for the scope).
// Python's figures for the same layers come from bench/nn_utils_bench.py (run-bench.sh).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <optional>

#include "modhooks/modhooks.h"
#include "paired.h"

namespace {

namespace F = torch::nn::functional;
namespace nu = modhooks::nn::utils;
using modhooks_bench::paired_batches;

constexpr int kBatch = 16;  // forwards per timed batch

/// weight_norm by hand: the weight computed from g and v in forward.
struct HandWeightNormLinearImpl : torch::nn::Module {
  explicit HandWeightNormLinearImpl(const torch::nn::Linear& from) {
    g = register_parameter("weight_g", at::norm_except_dim(from->weight, 2, 0).detach());
    v = register_parameter("weight_v", from->weight.detach().clone());
    b = register_parameter("bias", from->bias.detach().clone());
  }
  at::Tensor forward(const at::Tensor& x) { return F::linear(x, at::_weight_norm(v, g, 0), b); }
  at::Tensor g, v, b;
};
TORCH_MODULE(HandWeightNormLinear);

struct HandWeightNormConv1dImpl : torch::nn::Module {
  explicit HandWeightNormConv1dImpl(const torch::nn::Conv1d& from) {
    g = register_parameter("weight_g", at::norm_except_dim(from->weight, 2, 0).detach());
    v = register_parameter("weight_v", from->weight.detach().clone());
    b = register_parameter("bias", from->bias.detach().clone());
  }
  at::Tensor forward(const at::Tensor& x) {
    return F::conv1d(x, at::_weight_norm(v, g, 0), F::Conv1dFuncOptions().bias(b));
  }
  at::Tensor g, v, b;
};
TORCH_MODULE(HandWeightNormConv1d);

/// spectral_norm by hand: Python's SpectralNorm.compute_weight in forward.
struct HandSpectralNormLinearImpl : torch::nn::Module {
  explicit HandSpectralNormLinearImpl(const torch::nn::Linear& from) {
    w = register_parameter("weight_orig", from->weight.detach().clone());
    b = register_parameter("bias", from->bias.detach().clone());
    u = register_buffer("weight_u",
                        F::normalize(at::randn({w.size(0)}), F::NormalizeFuncOptions().dim(0)));
    v = register_buffer("weight_v",
                        F::normalize(at::randn({w.size(1)}), F::NormalizeFuncOptions().dim(0)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor uu, vv;
    {
      at::NoGradGuard no_grad;
      const at::Tensor tv = at::mv(w.t(), u);
      at::div_out(v, tv, at::linalg_vector_norm(tv, 2, {0}, true).clamp_min_(1e-12).expand_as(tv));
      const at::Tensor tu = at::mv(w, v);
      at::div_out(u, tu, at::linalg_vector_norm(tu, 2, {0}, true).clamp_min_(1e-12).expand_as(tu));
      uu = u.clone();
      vv = v.clone();
    }
    return F::linear(x, w / at::dot(uu, at::mv(w, vv)), b);
  }
  at::Tensor w, b, u, v;
};
TORCH_MODULE(HandSpectralNormLinear);

/// `layer` with the utility `apply` through modhooks::call against `Hand`, made from the layer
/// before the utility, both on a random input of `shape`.
template <class Hand, class Layer, class Apply>
void by_hand_vs_utility(benchmark::State& state, Layer layer, Apply apply, at::IntArrayRef shape) {
  Hand hand(layer);
  apply(layer);
  const at::Tensor x = at::randn(shape);
  paired_batches<kBatch>(
      state, [&] { return hand->forward(x); }, [&] { return modhooks::call(layer, x); });
}

constexpr auto kWeightNorm = [](auto& layer) { nu::weight_norm(layer); };
constexpr auto kSpectralNorm = [](auto& layer) { nu::spectral_norm(layer); };

void BM_WeightNormLinear_Utility_vs_ByHand(benchmark::State& state) {
  by_hand_vs_utility<HandWeightNormLinear>(state, torch::nn::Linear(256, 256), kWeightNorm,
                                           {32, 256});
}
BENCHMARK(BM_WeightNormLinear_Utility_vs_ByHand);

void BM_WeightNormConv1d_Utility_vs_ByHand(benchmark::State& state) {
  by_hand_vs_utility<HandWeightNormConv1d>(
      state, torch::nn::Conv1d(torch::nn::Conv1dOptions(64, 64, 3)), kWeightNorm, {8, 64, 128});
}
BENCHMARK(BM_WeightNormConv1d_Utility_vs_ByHand);

void BM_SpectralNormLinear_Utility_vs_ByHand(benchmark::State& state) {
  by_hand_vs_utility<HandSpectralNormLinear>(state, torch::nn::Linear(256, 256), kSpectralNorm,
                                             {32, 256});
}
BENCHMARK(BM_SpectralNormLinear_Utility_vs_ByHand);

/// A served layer (eval mode, no grad) against the same Linear without the utility, inside a
/// `Cached` scope where `cached`.
template <class Apply>
void served_vs_plain(benchmark::State& state, Apply apply, bool cached) {
  torch::nn::Linear plain(256, 256);
  torch::nn::Linear layer(256, 256);
  apply(layer);
  plain->eval();
  layer->eval();
  const at::Tensor x = at::randn({32, 256});
  at::NoGradGuard no_grad;
  std::optional<nu::parametrize::Cached> scope;
  if (cached) scope.emplace();
  paired_batches<kBatch>(
      state, [&] { return modhooks::call(plain, x); }, [&] { return modhooks::call(layer, x); });
}

/// The served cases, registered in this order under these names: the utility, and whether
/// inside a `Cached` scope.
[[maybe_unused]] const bool kServedCases = [] {
  struct Case {
    const char* name;
    void (*apply)(torch::nn::Linear&);
    bool cached;
  };
  for (const Case& c : {Case{"BM_WeightNormLinear_Served_vs_Plain", kWeightNorm, false},
                        Case{"BM_WeightNormLinear_ServedCached_vs_Plain", kWeightNorm, true},
                        Case{"BM_SpectralNormLinear_Served_vs_Plain", kSpectralNorm, false},
                        Case{"BM_SpectralNormLinear_ServedCached_vs_Plain", kSpectralNorm, true}}) {
    benchmark::RegisterBenchmark(c.name, served_vs_plain<void (*)(torch::nn::Linear&)>, c.apply,
                                 c.cached);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
