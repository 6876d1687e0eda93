// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils.h served from several threads: one model with weight_norm, spectral_norm and
// a parametrization applied, run without grad in eval mode by four threads at once. Each output
// must be one thread's alone, and no forward may write the members (CI runs this under TSan).
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

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
      Guard guard;
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

/// The model in eval mode, its output on one thread inside `Guard`, then four threads running
/// 200 forwards each inside `Guard`: every output that one, and no member written.
template <class Guard>
void serve_without_writes(Served& s, const at::Tensor& x) {
  s.model->eval();
  at::Tensor expected;
  {
    Guard guard;
    expected = modhooks::call(s.model, x);
  }
  const std::vector<at::Tensor> before = s.members();
  EXPECT_EQ(serve<Guard>(s.model, x, expected, 4, 200), 0);
  const std::vector<at::Tensor> after = s.members();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(after[i].is_same(before[i])) << i;
}

TEST(NnUtilsThreads, ServedWithoutGradFromFourThreads) {
  Served s;
  const at::Tensor x = at::randn({4, 16});
  s.model->train();
  modhooks::call(s.model, x).sum().backward();  // trained a step: the next forward computes
  serve_without_writes<at::NoGradGuard>(s, x);
}

TEST(NnUtilsThreads, ServedInInferenceModeFromFourThreads) {
  Served s;
  serve_without_writes<c10::InferenceMode>(s, at::randn({4, 16}));
}

TEST(NnUtilsThreads, TheFirstServedForwardsRaceToComputeOnce) {
  // No forward has computed since the weights changed: the threads' first forwards meet at each
  // utility, one computes, the others read what it computed.
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
  EXPECT_EQ(serve<at::NoGradGuard>(s.model, x, expected, 4, 20), 0);
}

TEST(NnUtilsThreads, AServedForwardSeesAnOptimizersStep) {
  // libtorch's optimizers write through `.data()`, which no version counter sees; the backward
  // before the step changed the gradients, which the served forward checks too.
  Linear layer(8, 8);
  nu::weight_norm(layer);
  const at::Tensor x = at::randn({2, 8});
  torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.5));
  layer->eval();
  at::Tensor served;
  for (int step = 0; step < 3; ++step) {
    {
      at::NoGradGuard no_grad;
      served = modhooks::call(layer, x);
    }
    const auto params = layer->named_parameters();
    const at::Tensor by_hand =
        at::linear(x, at::_weight_norm(params["weight_v"], params["weight_g"], 0), params["bias"]);
    EXPECT_TRUE(at::allclose(served, by_hand.detach())) << "step " << step;
    sgd.zero_grad();
    modhooks::call(layer, x).pow(2).sum().backward();
    sgd.step();
  }
}

TEST(NnUtilsThreads, WhatAServedForwardSeesOfAWrite) {
  // docs/nn_utils.md: a write in place on a parameter bumps its version, which the next served
  // forward sees; a write through `.data()` has a version counter of its own, and a served
  // forward sees it only once a backward pass or a forward that computes came between.
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
  EXPECT_TRUE(at::equal(served(), y1));                           // not seen
  const at::Tensor computed = modhooks::call(layer, x).detach();  // with grad: computes
  EXPECT_FALSE(at::equal(computed, y1));
  EXPECT_TRUE(at::equal(served(), computed));
}

}  // namespace
