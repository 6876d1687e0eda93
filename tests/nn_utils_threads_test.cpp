// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils.h served from several threads, and what a forward without grad sees: one
// model with weight_norm, spectral_norm and a parametrization applied, run by four threads at
// once, outside and inside a `parametrize::Cached` scope. Each output must be one thread's alone
// (CI runs this under TSan); every forward computes, as in Python, so every write shows.
#include <ATen/autocast_mode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <atomic>
#include <thread>
#include <vector>

#include "modhooks/modhooks.h"

namespace {

namespace nu = modhooks::nn::utils;
using torch::nn::Linear;

struct Served {
  modhooks::Sequential model{nu::weight_norm(Linear(16, 16)), torch::nn::ReLU(),
                             nu::spectral_norm(Linear(16, 16)), torch::nn::ReLU(),
                             nu::parametrizations::spectral_norm(Linear(16, 8))};
  /// The members the forwards read, as they are now.
  std::vector<at::Tensor> members() {
    return {model->ptr<torch::nn::LinearImpl>(0)->weight,
            model->ptr<torch::nn::LinearImpl>(2)->weight,
            model->ptr<torch::nn::LinearImpl>(4)->weight};
  }
};

/// Runs `forwards` forwards on each of `threads` threads inside `Guard`; returns how many
/// outputs differed from `expected`.
template <class Guard>
int serve(modhooks::Sequential& model, const at::Tensor& x, const at::Tensor& expected, int threads,
          int forwards) {
  std::atomic<int> wrong{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      [[maybe_unused]] const Guard guard;
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < forwards; ++i) {
        if (!at::equal(modhooks::call(model, x), expected)) ++wrong;
      }
    });
  }
  go = true;
  for (std::thread& thread : pool) thread.join();
  return wrong.load();
}

/// Nothing around the forwards (no grad mode is set: each thread's own).
struct NoGuard {};

/// Grad off and a `Cached` scope: the model's utilities are computed once, then read by all.
struct CachedNoGrad {
  at::NoGradGuard no_grad;
  nu::parametrize::Cached cached;
};

/// The model in eval mode, its output on one thread inside `Guard`, then four threads running
/// 200 forwards each inside `Guard`: every output that one.
template <class Guard>
void serve_from_four_threads(Served& s, const at::Tensor& x) {
  s.model->eval();
  at::Tensor expected;
  {
    [[maybe_unused]] const Guard guard;
    expected = modhooks::call(s.model, x);
  }
  EXPECT_EQ(serve<Guard>(s.model, x, expected, 4, 200), 0);
}

TEST(NnUtilsThreads, ServedWithoutGradFromFourThreads) {
  Served s;
  const at::Tensor x = at::randn({4, 16});
  s.model->train();
  modhooks::call(s.model, x).sum().backward();
  serve_from_four_threads<at::NoGradGuard>(s, x);
}

TEST(NnUtilsThreads, ServedInInferenceModeFromFourThreads) {
  Served s;
  serve_from_four_threads<c10::InferenceMode>(s, at::randn({4, 16}));
}

TEST(NnUtilsThreads, ServedWithGradFromFourThreads) {
  // Every forward computes and assigns the members: the module's forwards run one at a time.
  Served s;
  serve_from_four_threads<NoGuard>(s, at::randn({4, 16}));
}

TEST(NnUtilsThreads, AModelConvertedInInferenceModeServedFromFourThreads) {
  // Parameters made or moved inside InferenceMode are inference tensors, as in Python.
  for (int run = 0; run < 5; ++run) {
    Served s;
    {
      c10::InferenceMode inference;
      s.model->to(at::kDouble);
    }
    const at::Tensor x = at::randn({4, 16}, at::kDouble);
    serve_from_four_threads<c10::InferenceMode>(s, x);
  }
}

TEST(NnUtilsThreads, ACachedScopeComputesOnceForEveryThread) {
  // Python's `parametrize.cached()` is process-wide: what one thread computed in the scope, the
  // others read, in parallel, and no forward writes a member again until the scope ends.
  Served s;
  s.model->eval();
  const at::Tensor x = at::randn({4, 16});
  at::Tensor expected;
  std::vector<at::Tensor> computed;
  {
    CachedNoGrad scope;
    expected = modhooks::call(s.model, x);
    computed = s.members();
    EXPECT_EQ(serve<CachedNoGrad>(s.model, x, expected, 4, 200), 0);
    const std::vector<at::Tensor> after = s.members();
    for (std::size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i].is_same(computed[i])) << i;
  }
  // The scope ended: the next forward computes anew.
  at::NoGradGuard no_grad;
  modhooks::call(s.model, x);
  const std::vector<at::Tensor> after = s.members();
  for (std::size_t i = 0; i < after.size(); ++i) EXPECT_FALSE(after[i].is_same(computed[i])) << i;
}

TEST(NnUtilsThreads, ACachedScopeKeepsAParametrizationComputedWithGrad) {
  // Python's cache holds a parametrized tensor whatever the grad mode; a hook form (weight_norm)
  // computes at each forward with grad, as Python's hooks do.
  Linear parametrized(4, 4);
  nu::parametrizations::weight_norm(parametrized);
  Linear hooked(4, 4);
  nu::weight_norm(hooked);
  const at::Tensor x = at::randn({2, 4});
  nu::parametrize::Cached cached;
  modhooks::call(parametrized, x);
  modhooks::call(hooked, x);
  const at::Tensor kept = parametrized->weight;
  const at::Tensor first = hooked->weight;
  modhooks::call(parametrized, x);
  modhooks::call(hooked, x);
  EXPECT_TRUE(parametrized->weight.is_same(kept));
  EXPECT_FALSE(hooked->weight.is_same(first));
}

TEST(NnUtilsThreads, TheFirstServedForwardsRaceToComputeOnce) {
  // No forward has computed since the weights changed: the threads' first forwards in a
  // `Cached` scope meet at the model, one computes, the others read what it computed.
  Served s;
  s.model->eval();
  const at::Tensor x = at::randn({4, 16});
  {
    at::NoGradGuard no_grad;
    for (auto& parameter : s.model->parameters()) parameter.mul_(1.5);
  }
  Served reference;
  reference.model->eval();
  modhooks::load_state_dict(reference.model, modhooks::state_dict(s.model));
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = modhooks::call(reference.model, x);
  }
  nu::parametrize::Cached scope;  // lives beside the threads' own
  EXPECT_EQ(serve<CachedNoGrad>(s.model, x, expected, 4, 20), 0);
}

TEST(NnUtilsThreads, AForwardWithoutGradBetweenBackwardAndStepSeesTheStep) {
  // libtorch's optimizers write through `.data()`, which no version counter sees; a forward
  // without grad in eval mode between the backward and the step (a validation forward) must
  // not keep the weight from before the step.
  Linear layer(8, 8);
  nu::weight_norm(layer);
  const at::Tensor x = at::randn({2, 8});
  torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.5));
  layer->eval();
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    modhooks::call(layer, x).pow(2).sum().backward();
    {
      at::NoGradGuard no_grad;
      modhooks::call(layer, x);
    }
    sgd.step();
    at::Tensor served;
    {
      at::NoGradGuard no_grad;
      served = modhooks::call(layer, x);
    }
    const auto params = layer->named_parameters();
    const at::Tensor by_hand =
        at::linear(x, at::_weight_norm(params["weight_v"], params["weight_g"], 0), params["bias"]);
    EXPECT_TRUE(at::equal(served, by_hand.detach())) << "step " << step;
  }
}

TEST(NnUtilsThreads, AServedForwardSeesEveryWrite) {
  // A write in place and one through `.data()` (its own version counter) both show in the next
  // forward without grad, as in Python, where every forward computes.
  Linear layer(4, 4);
  nu::weight_norm(layer);
  layer->eval();
  const at::Tensor x = at::randn({2, 4});
  const at::Tensor g = layer->named_parameters()["weight_g"];
  auto served = [&] {
    at::NoGradGuard no_grad;
    return modhooks::call(layer, x);
  };
  const at::Tensor y0 = served();
  {
    at::NoGradGuard no_grad;
    g.mul_(2);
  }
  const at::Tensor y1 = served();
  EXPECT_FALSE(at::equal(y1, y0));
  g.data().mul_(2);
  const at::Tensor y2 = served();
  EXPECT_FALSE(at::equal(y2, y1));
  EXPECT_TRUE(at::equal(y2, modhooks::call(layer, x).detach()));
}

/// Python's `torch.autocast("cpu", torch.bfloat16)` on or off, in the spelling of each libtorch.
void cpu_autocast(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, on);
#else
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(on);
#endif
  if (!on) at::autocast::clear_cache();
}

/// A parametrization whose matrix product autocast runs in bf16.
struct GramImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return at::mm(x, x.t()); }
};
TORCH_MODULE(Gram);

TEST(NnUtilsThreads, AWeightComputedUnderAutocastIsNotKept) {
  // The first forward runs in a bf16 autocast region, where the parametrization computes a bf16
  // weight; the next one, outside it, computes its weight anew in float32.
  Linear layer(4, 4);
  nu::parametrize::register_parametrization(layer, "weight", Gram());
  layer->eval();
  const at::Tensor x = at::randn({2, 4});
  at::NoGradGuard no_grad;
  cpu_autocast(true);
  const at::Tensor low = modhooks::call(layer, x);
  cpu_autocast(false);
  EXPECT_EQ(low.scalar_type(), at::kBFloat16);
  const at::Tensor original =
      nu::parametrize::parametrizations(layer, "weight")->named_parameters()["original"];
  const at::Tensor by_hand = at::linear(x, at::mm(original, original.t()), layer->bias);
  EXPECT_TRUE(at::allclose(modhooks::call(layer, x), by_hand));
}

TEST(NnUtilsThreads, ACachedValueComputedOnOneStreamIsReadOnAnother) {
  // CUDA: one thread computes the scope's weight on its stream, three others read it on theirs
  // (scripts/device-check.sh runs it); each stream waits for the computation and the value's
  // memory stays until every stream is done with it.
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::DeviceType::CUDA, 0);
  Served s;
  s.model->eval();
  s.model->to(cuda);
  const at::Tensor x = at::randn({256, 16}, cuda);
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = modhooks::call(s.model, x).cpu();
  }
  const c10::impl::VirtualGuardImpl streams(c10::DeviceType::CUDA);
  std::atomic<int> wrong{0};
  {
    nu::parametrize::Cached scope;
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
      pool.emplace_back([&] {
        const c10::StreamGuard on(streams.getStreamFromGlobalPool(cuda));
        const at::NoGradGuard no_grad;
        for (int i = 0; i < 50; ++i) {
          if (!at::allclose(modhooks::call(s.model, x).cpu(), expected)) ++wrong;
        }
      });
    }
    for (std::thread& thread : pool) thread.join();
  }
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
