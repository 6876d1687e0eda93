// SPDX-License-Identifier: BSD-3-Clause
// The nn utilities in the patterns people train with: the scenarios of
// tests/python/oracle_nn_utils_patterns.py replayed in C++ (float64) and compared with what
// Python did, step by step: a module run twice before one backward (the SN-GAN discriminator
// step), gradient accumulation, a module called twice in one forward, an optimizer built before
// pruning or a parametrization, on Linear, Conv1d, Conv2d, ConvTranspose2d, Embedding and LSTM.
#pragma once

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/modhooks.h"
#include "nn_utils_scenarios.h"

namespace nn_utils_patterns {

namespace nu = modhooks::nn::utils;
using Target = std::pair<std::shared_ptr<torch::nn::Module>, std::string>;

using nn_utils_scenarios::Symmetric;

/// A module of a kind, how it runs through its hooks, and the tensors a utility goes on.
struct Built {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::vector<Target> targets;
};

template <class Holder>
Built built(Holder holder, const std::string& name = "weight") {
  return {holder.ptr(),
          [holder](const at::Tensor& x) { return modhooks::call(holder, x); },
          {{holder.ptr(), name}}};
}

inline Built build(const std::string& kind) {
  namespace tn = torch::nn;
  if (kind == "linear") return built(tn::Linear(5, 4));
  if (kind == "square") return built(tn::Linear(4, 4));
  if (kind == "conv1d") return built(tn::Conv1d(tn::Conv1dOptions(3, 4, 3)));
  if (kind == "conv2d") return built(tn::Conv2d(tn::Conv2dOptions(2, 4, 3)));
  if (kind == "convt2d") return built(tn::ConvTranspose2d(tn::ConvTranspose2dOptions(3, 2, 3)));
  if (kind == "embedding") return built(tn::Embedding(6, 4));
  if (kind == "lstm" || kind == "lstm2") {
    tn::LSTM lstm(tn::LSTMOptions(3, 4));
    std::vector<Target> targets{{lstm.ptr(), "weight_hh_l0"}};
    if (kind == "lstm2") targets.insert(targets.begin(), {lstm.ptr(), "weight_ih_l0"});
    return {lstm.ptr(),
            [lstm](const at::Tensor& x) { return std::get<0>(modhooks::call(lstm, x)); }, targets};
  }
  if (kind == "lstm_cached") {
    tn::LSTM lstm(tn::LSTMOptions(3, 4));
    return {lstm.ptr(),
            [lstm](const at::Tensor& x) {
              const modhooks::nn::utils::parametrize::Cached cached;
              return std::get<0>(modhooks::call(lstm, x));
            },
            {{lstm.ptr(), "weight_hh_l0"}}};
  }
  if (kind == "disc_conv" || kind == "disc_linear") {
    modhooks::Sequential d =
        kind == "disc_conv"
            ? modhooks::Sequential(tn::Conv2d(tn::Conv2dOptions(3, 4, 3)),
                                   tn::LeakyReLU(tn::LeakyReLUOptions().negative_slope(0.2)),
                                   tn::Conv2d(tn::Conv2dOptions(4, 3, 3)))
            : modhooks::Sequential(tn::Linear(6, 5),
                                   tn::LeakyReLU(tn::LeakyReLUOptions().negative_slope(0.2)),
                                   tn::Linear(5, 3));
    return {d.ptr(),
            [d](const at::Tensor& x) { return modhooks::call(d, x); },
            {{d->ptr(0), "weight"}, {d->ptr(2), "weight"}}};
  }
  throw std::invalid_argument("no module kind " + kind);
}

inline void apply_utility(const Built& b, const std::string& utility) {
  torch::manual_seed(1);
  for (const auto& [module, name] : b.targets) {
    // "mixed": the hook form weight_norm on the first target, a parametrization on the others.
    if (utility == "mixed") {
      if (&module == &b.targets.front().first) {
        nu::weight_norm(module, name);
      } else {
        nu::parametrizations::spectral_norm(module, name);
      }
    } else if (utility == "wn") {
      nu::weight_norm(module, name);
    } else if (utility == "sn") {
      nu::spectral_norm(module, name);
    } else if (utility == "pwn") {
      nu::parametrizations::weight_norm(module, name);
    } else if (utility == "psn") {
      nu::parametrizations::spectral_norm(module, name);
    } else if (utility == "prune") {
      nu::prune::l1_unstructured(module, name, 0.3);
    } else if (utility == "psym") {
      nu::parametrize::register_parametrization(module, name, Symmetric());
    } else {
      throw std::invalid_argument("no utility " + utility);
    }
  }
}

inline std::string oracle_dir() { return MODHOOKS_FIXTURES "/nn_utils/patterns/"; }

inline const nlohmann::json& table() {
  static const nlohmann::json parsed =
      nn_utils_scenarios::oracle_json(oracle_dir() + "patterns.json");
  return parsed;
}

/// How far C++ may be from Python in float64, relative to the larger of 1 and the largest
/// magnitude expected: rounding with the libtorch of Python's version, a little more with
/// libtorch 1.13 (whose kernels reduce in other orders).
inline double tolerance() {
  const std::string here =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  return table().at("torch").get<std::string>() == here ? 1e-12 : 1e-9;
}

inline ::testing::AssertionResult near(const at::Tensor& actual, const at::Tensor& expected) {
  return nn_utils_scenarios::near(actual, expected, tolerance());
}

/// The scenario `name` replayed in C++, each step compared with Python's.
inline void replay(const std::string& name) {
  SCOPED_TRACE(name);
  const nlohmann::json& scenario = table().at("scenarios").at(name);
  const auto procedure = scenario.at("procedure").get<std::string>();
  const auto kind = scenario.at("kind").get<std::string>();
  const auto utility = scenario.at("utility").get<std::string>();
  const modhooks::StateDict record = modhooks::load(oracle_dir() + name + ".pt");

  Built b = build(kind);
  b.module->to(at::kDouble);
  modhooks::StateDict init;
  for (const auto& [key, tensor] : record) {
    if (key.rfind("init.", 0) == 0) init.insert_or_assign(key.substr(5), tensor);
  }
  modhooks::load_state_dict(*b.module, init);
  const std::vector<at::Tensor> xs{record.at("x0"), record.at("x1")};
  // "validate": trained in eval mode, with a forward without grad between each backward and
  // the optimizer's step (libtorch's SGD writes through `.data()`, which no version counter sees).
  const bool validate = procedure == "validate";
  if (validate) {
    b.module->eval();
  } else {
    b.module->train();
  }

  std::unique_ptr<torch::optim::SGD> optimizer;
  const bool first = procedure == "prune_first" || procedure == "parametrize_first";
  auto make_optimizer = [&] {
    optimizer =
        std::make_unique<torch::optim::SGD>(b.module->parameters(), torch::optim::SGDOptions(0.05));
  };
  if (first) {
    make_optimizer();
    if (procedure == "parametrize_first") apply_utility(b, utility);
  } else {
    apply_utility(b, utility);
    make_optimizer();
  }
  const int steps = 3 + (first ? 1 : 0);
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (procedure == "prune_first" && step < 3) {
      for (const auto& [module, n] : b.targets) nu::prune::l1_unstructured(module, n, 0.25);
    }
    if (procedure == "prune_first" && step == 3) {
      for (const auto& [module, n] : b.targets) nu::prune::remove(module, n);
    }
    if (procedure == "parametrize_first" && step == 2) {
      for (const auto& [module, n] : b.targets) nu::parametrize::remove_parametrizations(module, n);
    }
    optimizer->zero_grad();
    if (procedure == "accumulate") {
      for (int i = 0; i < 3; ++i) (b.forward(xs[i % 2] * (i + 1)).pow(2).mean() / 3).backward();
    } else if (procedure == "shared") {
      b.forward(b.forward(xs[0])).pow(2).sum().backward();
    } else if (procedure == "twice") {
      std::vector<at::Tensor> inputs;
      for (const at::Tensor& x : xs)
        inputs.push_back(x.is_floating_point() ? x.clone().requires_grad_() : x);
      // In Python's order: the operands of `-` are evaluated in no set order in C++.
      const at::Tensor real = b.forward(inputs[0]).pow(2).mean();
      const at::Tensor fake = b.forward(inputs[1]).mean();
      (real - fake).backward();
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const std::string key = "step" + std::to_string(step) + ".grad_x" + std::to_string(i);
        if (inputs[i].requires_grad()) {
          EXPECT_TRUE(near(inputs[i].grad(), record.at(key))) << key;
        }
      }
    } else {
      b.forward(xs[0]).pow(2).sum().backward();
    }
    if (validate) {
      const at::NoGradGuard no_grad;
      const std::string key = "step" + std::to_string(step) + ".validate";
      EXPECT_TRUE(near(b.forward(xs[1]), record.at(key))) << key;
    }
    const std::string prefix = "step" + std::to_string(step) + ".grad.";
    std::size_t expected_grads = 0;
    for (const auto& [key, tensor] : record) expected_grads += key.rfind(prefix, 0) == 0;
    std::size_t grads = 0;
    for (const auto& item : b.module->named_parameters()) {
      if (!item.value().grad().defined()) continue;
      ++grads;
      ASSERT_TRUE(record.contains(prefix + item.key()))
          << "a gradient Python has not: " << item.key();
      EXPECT_TRUE(near(item.value().grad(), record.at(prefix + item.key())))
          << "grad of " << item.key();
    }
    EXPECT_EQ(grads, expected_grads) << "parameters with a gradient";
    optimizer->step();
  }
  const modhooks::StateDict trained = modhooks::state_dict(*b.module);
  std::vector<std::string> expected_keys;
  for (const auto& [key, tensor] : record) {
    if (key.rfind("final.", 0) == 0) expected_keys.push_back(key.substr(6));
  }
  ASSERT_EQ(trained.keys(), expected_keys);
  for (const auto& [key, tensor] : trained)
    EXPECT_TRUE(near(tensor, record.at("final." + key))) << "trained " << key;
  b.module->eval();
  at::NoGradGuard no_grad;
  EXPECT_TRUE(near(b.forward(xs[0]), record.at("eval"))) << "eval";
  EXPECT_TRUE(near(b.forward(xs[0]), record.at("eval_again"))) << "eval, again";
}

/// Every scenario whose utility is one of `utilities`, replayed; fails where there is none.
inline void replay_all(const std::vector<std::string>& utilities) {
  int count = 0;
  for (const auto& [name, scenario] : table().at("scenarios").items()) {
    const auto utility = scenario.at("utility").get<std::string>();
    if (std::find(utilities.begin(), utilities.end(), utility) == utilities.end()) continue;
    replay(name);
    ++count;
  }
  EXPECT_GT(count, 0);
}

}  // namespace nn_utils_patterns
