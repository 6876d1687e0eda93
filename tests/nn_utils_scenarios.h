// SPDX-License-Identifier: BSD-3-Clause
// The nn utilities' differential tests: the scenarios of tests/python/nn_utils_scenarios.py
// built in C++, and what each test checks against Python (tests/python/oracle_nn_utils.py).
#pragma once

#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "test_util.h"

namespace nn_utils_scenarios {

namespace nu = modhooks::nn::utils;

/// Python's Symmetric (PyTorch's parametrize tutorial), with its right inverse.
struct SymmetricImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x.triu() + x.triu(1).transpose(0, 1); }
  at::Tensor right_inverse(const at::Tensor& a) { return a.triu(); }
};
TORCH_MODULE(Symmetric);

struct Scenario {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;  // through the module's hooks
  std::function<void()> apply;                           // the utilities, as Python applies them
};

template <class Holder>
Scenario of(Holder holder, std::function<void(Holder&)> apply) {
  Scenario s;
  s.module = holder.ptr();
  s.forward = [holder](const at::Tensor& x) { return modhooks::call(holder, x); };
  s.apply = [holder, apply]() mutable { apply(holder); };
  return s;
}

inline Scenario make(const std::string& name) {
  using torch::nn::Conv1d;
  using torch::nn::Conv1dOptions;
  using torch::nn::Conv2d;
  using torch::nn::Conv2dOptions;
  using torch::nn::Linear;
  auto conv1d = [] { return Conv1d(Conv1dOptions(3, 4, 3)); };
  auto conv2d = [] { return Conv2d(Conv2dOptions(2, 4, 3)); };
  if (name == "wn_linear")
    return of<Linear>(Linear(5, 4), [](Linear& m) { nu::weight_norm(m, "weight", 0); });
  if (name == "wn_conv1d_none")
    return of<Conv1d>(conv1d(), [](Conv1d& m) { nu::weight_norm(m, "weight", std::nullopt); });
  if (name == "sn_linear") return of<Linear>(Linear(5, 4), [](Linear& m) { nu::spectral_norm(m); });
  if (name == "sn_tall") return of<Linear>(Linear(4, 6), [](Linear& m) { nu::spectral_norm(m); });
  if (name == "sn_conv2d")
    return of<Conv2d>(conv2d(), [](Conv2d& m) { nu::spectral_norm(m, "weight", 2); });
  if (name == "sn_convt2d") {
    using torch::nn::ConvTranspose2d;
    return of<ConvTranspose2d>(ConvTranspose2d(torch::nn::ConvTranspose2dOptions(3, 2, 3)),
                               [](ConvTranspose2d& m) { nu::spectral_norm(m); });
  }
  if (name == "sn_embedding") {
    using torch::nn::Embedding;
    return of<Embedding>(Embedding(6, 4), [](Embedding& m) { nu::spectral_norm(m); });
  }
  if (name == "pwn_conv1d")
    return of<Conv1d>(conv1d(), [](Conv1d& m) { nu::parametrizations::weight_norm(m); });
  if (name == "psn_linear")
    return of<Linear>(Linear(5, 4), [](Linear& m) { nu::parametrizations::spectral_norm(m); });
  if (name == "psn_conv2d") {
    return of<Conv2d>(conv2d(),
                      [](Conv2d& m) { nu::parametrizations::spectral_norm(m, "weight", 2); });
  }
  if (name == "psym_linear") {
    return of<Linear>(Linear(4, 4), [](Linear& m) {
      nu::parametrize::register_parametrization(m, "weight", Symmetric());
    });
  }
  if (name == "prune_l1") {
    return of<Linear>(Linear(5, 4), [](Linear& m) {
      nu::prune::l1_unstructured(m, "weight", 0.3);
      nu::prune::random_unstructured(m, "bias", 2);
    });
  }
  if (name == "prune_repeat") {
    return of<Conv2d>(conv2d(), [](Conv2d& m) {
      nu::prune::ln_structured(m, "weight", 0.5, /*n=*/2.0, /*dim=*/0);
      nu::prune::l1_unstructured(m, "weight", 5);
    });
  }
  if (name == "prune_random_structured") {
    return of<Conv1d>(conv1d(),
                      [](Conv1d& m) { nu::prune::random_structured(m, "weight", 0.5, 1); });
  }
  if (name == "prune_custom") {
    return of<Linear>(Linear(5, 4), [](Linear& m) {
      nu::prune::custom_from_mask(m, "weight",
                                  (at::arange(20) % 3 != 0).reshape({4, 5}).to(at::kFloat));
    });
  }
  if (name == "prune_global") {
    return of<modhooks::Sequential>(
        modhooks::Sequential(Linear(5, 4), Linear(4, 3)), [](modhooks::Sequential& m) {
          nu::prune::global_unstructured({{m->ptr(0), "weight"}, {m->ptr(1), "weight"}},
                                         nu::prune::L1Unstructured, 0.4);
        });
  }
  ADD_FAILURE() << "no scenario " << name;
  return {};
}

/// The parameter or buffer `name` of the module or a submodule ("parametrizations.weight.0._u"),
/// or undefined.
inline at::Tensor parameter_of(const torch::nn::Module& m, const std::string& name) {
  const auto all = m.named_parameters();
  const at::Tensor* found = all.find(name);
  return found ? *found : at::Tensor();
}
inline at::Tensor buffer_of(const torch::nn::Module& m, const std::string& name) {
  const auto all = m.named_buffers();
  const at::Tensor* found = all.find(name);
  return found ? *found : at::Tensor();
}

/// One literal, not a concatenation at run time: GCC 12 at -O1 reported impossible copy bounds
/// for `std::string(MODHOOKS_FIXTURES) + "/nn_utils/"` (-Warray-bounds, -Wstringop-overread).
inline std::string oracle_dir() { return MODHOOKS_FIXTURES "/nn_utils/"; }

/// The entries of `record` under "<prefix>." as a state dict, in order.
inline modhooks::StateDict under(const modhooks::StateDict& record, const std::string& prefix) {
  modhooks::StateDict out;
  for (const auto& [key, tensor] : record) {
    if (key.rfind(prefix + ".", 0) == 0)
      out.insert_or_assign(key.substr(prefix.size() + 1), tensor);
  }
  return out;
}

/// A JSON file an oracle wrote.
inline nlohmann::json oracle_json(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("no " + path + ": run the python_oracle test first");
  return nlohmann::json::parse(file);
}

/// The oracle's torch version ("2.15") and its scenarios' names.
inline const nlohmann::json& oracle() {
  static const nlohmann::json parsed = oracle_json(oracle_dir() + "oracle.json");
  return parsed;
}

/// How far C++ may be from Python, relative to the larger of 1 and the largest magnitude
/// expected: 1e-6 with the libtorch of Python's version (the same kernels), 1e-4 with another
/// (libtorch 1.13's kernels reduce in other orders, and three training steps carry that on).
inline double tolerance() {
  const std::string here =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  return oracle().at("torch").get<std::string>() == here ? 1e-6 : 1e-4;
}

/// Whether two tensors agree within `tol` (relative to the larger of 1 and the largest magnitude
/// expected), with the largest difference in the message.
inline ::testing::AssertionResult near(const at::Tensor& actual, const at::Tensor& expected,
                                       double tol = tolerance()) {
  if (!actual.defined() || !expected.defined()) return ::testing::AssertionFailure() << "undefined";
  if (!actual.sizes().equals(expected.sizes()))
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " vs " << expected.sizes();
  if (actual.numel() == 0) return ::testing::AssertionSuccess();
  const at::Tensor wanted = expected.to(at::kDouble);
  const double diff = (actual.to(at::kDouble) - wanted).abs().max().item<double>();
  const double scale = std::max(1.0, wanted.abs().max().item<double>());
  if (diff <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "differs by up to " << diff << " (scale " << scale << ")";
}

inline std::vector<std::string> names(const torch::OrderedDict<std::string, at::Tensor>& dict) {
  return dict.keys();
}

/// A fresh module of the scenario with Python's initial weights, the utilities applied.
inline Scenario prepared(const std::string& name, const modhooks::StateDict& record) {
  Scenario s = make(name);
  modhooks::load_state_dict(*s.module, under(record, "init"));
  torch::manual_seed(1);
  s.apply();
  s.module->train();
  return s;
}

/// The whole differential check of one scenario: outputs, gradients, names in order, training,
/// eval mode, and the state dict crossing to and from Python.
inline void check_against_python(const std::string& name) {
  SCOPED_TRACE(name);
  const modhooks::StateDict record = modhooks::load(oracle_dir() + name + ".pt");
  const nlohmann::json& expected_names = oracle().at("scenarios").at(name);

  Scenario s = prepared(name, record);
  const at::Tensor x = record.at("x");
  const at::Tensor y = s.forward(x);
  EXPECT_TRUE(near(y, record.at("y"))) << "first forward";
  y.pow(2).sum().backward();
  for (const auto& item : s.module->named_parameters()) {
    EXPECT_TRUE(near(item.value().grad(), record.at("grad." + item.key())))
        << "grad of " << item.key();
  }
  EXPECT_EQ(modhooks::state_dict(*s.module).keys(),
            expected_names.at("state_keys").get<std::vector<std::string>>());
  EXPECT_EQ(names(s.module->named_parameters()),
            expected_names.at("parameters").get<std::vector<std::string>>());
  EXPECT_EQ(names(s.module->named_buffers()),
            expected_names.at("buffers").get<std::vector<std::string>>());

  torch::optim::SGD optimizer(s.module->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    s.forward(x).pow(2).sum().backward();
    optimizer.step();
  }
  const modhooks::StateDict trained = modhooks::state_dict(*s.module);
  const modhooks::StateDict expected = under(record, "final");
  ASSERT_EQ(trained.keys(), expected.keys());
  for (const auto& [key, tensor] : trained)
    EXPECT_TRUE(near(tensor, expected.at(key))) << "trained " << key;
  s.module->eval();
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(near(s.forward(x), record.at("eval"))) << "eval-mode output";
  }

  // Python's state dict (its metadata included) into the C++ module with the same utilities.
  Scenario loaded = prepared(name, record);
  modhooks::load_state_dict(*loaded.module, modhooks::load(oracle_dir() + name + "_sd.pt"));
  loaded.module->eval();
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(near(loaded.forward(x), record.at("eval"))) << "after loading Python's state dict";
  }
  // And back: what C++ saves loads into Python's module (strict) and holds Python's values.
  const std::string saved = std::string(MODHOOKS_FIXTURES) + "/nn_utils/cpp_" + name + ".pt";
  modhooks::save(trained, saved);
  const std::string command = std::string("\"") + MODHOOKS_PYTHON + "\" \"" +
                              MODHOOKS_TEST_SOURCE_DIR + "/python/check_nn_utils.py\" \"" + saved +
                              "\" " + name + " \"" + oracle_dir() + "\" " +
                              std::to_string(tolerance());
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

/// A utility applied to a `Linear(4, 3)` where `taken` is already a buffer (or, with `module`, a
/// submodule): Python's KeyError "attribute '<taken>' already exists", raised before anything
/// changed (Python raises it after deleting the weight): the same parameters, buffers,
/// submodules and member, no hook, and the plain forward.
inline void expect_name_taken(const std::function<void(torch::nn::Linear&)>& apply,
                              const std::string& taken, bool module = false) {
  SCOPED_TRACE(taken);
  torch::nn::Linear m(4, 3);
  if (module) {
    m->register_module(taken, torch::nn::Linear(1, 1));
  } else {
    m->register_buffer(taken, at::zeros({1}));
  }
  const std::vector<std::string> parameters = m->named_parameters().keys();
  const std::vector<std::string> buffers = m->named_buffers().keys();
  const std::size_t children = m->children().size();
  const at::Tensor weight = m->weight;
  EXPECT_ERROR_WITH(apply(m), KeyError, "nn.utils.name_taken",
                    "\"attribute '" + taken + "' already exists\"");
  EXPECT_EQ(m->named_parameters().keys(), parameters);
  EXPECT_EQ(m->named_buffers().keys(), buffers);
  EXPECT_EQ(m->children().size(), children);
  EXPECT_TRUE(m->weight.is_same(weight));
  EXPECT_TRUE(m->named_parameters()["weight"].is_same(weight));
  const at::Tensor x = at::randn({2, 4});
  EXPECT_TRUE(at::equal(modhooks::call(m, x), at::linear(x, weight, m->bias)));
}

}  // namespace nn_utils_scenarios
