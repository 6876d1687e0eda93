// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/optim/optim.h"

#include <ATen/Parallel.h>
#include <ATen/core/Dict.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/mse_loss.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "modhooks/checkpoint/object.h"
#include "modhooks/optim/adam.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_dict.h"
#include "test_util.h"

namespace {

using c10::IValue;
using torch::optim::Optimizer;

/// oracle_optim.py's STEPS and RESUME.
constexpr int kSteps = 8;
constexpr int kResume = 3;

std::string fixture(const std::string& name) {
  return std::string(MODHOOKS_FIXTURES) + "/optim/" + name;
}

/// "python_adam" and "python_adamw" are modhooks' Adam and AdamW, which resume Python's runs of
/// Adam and AdamW.
std::string python_name(const std::string& name) {
  const std::string prefix = "python_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

IValue at(const IValue& dict, const std::string& key) { return dict.toGenericDict().at(key); }

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2));
}

std::vector<torch::optim::OptimizerParamGroup> groups_of(torch::nn::Sequential& model) {
  return {torch::optim::OptimizerParamGroup(model[0]->parameters()),
          torch::optim::OptimizerParamGroup(model[2]->parameters())};
}

/// The optimizer of `name`, with hyper-parameters unlike oracle_optim.py's (lr 1.0 and the
/// defaults): they must come from the loaded state.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, torch::nn::Sequential& model) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(groups_of(model), torch::optim::SGDOptions(1.0));
  }
  if (name == "python_adam") {
    return std::make_unique<modhooks::optim::Adam>(groups_of(model),
                                                   torch::optim::AdamOptions(1.0));
  }
  if (name == "python_adamw") {
    return std::make_unique<modhooks::optim::AdamW>(groups_of(model),
                                                    torch::optim::AdamWOptions(1.0));
  }
  if (name == "adam") {
    return std::make_unique<torch::optim::Adam>(groups_of(model), torch::optim::AdamOptions(1.0));
  }
  if (name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(groups_of(model), torch::optim::AdamWOptions(1.0));
  }
  if (name == "rmsprop") {
    return std::make_unique<torch::optim::RMSprop>(groups_of(model),
                                                   torch::optim::RMSpropOptions(1.0));
  }
  return std::make_unique<torch::optim::Adagrad>(groups_of(model),
                                                 torch::optim::AdagradOptions(1.0));
}

void train_step(torch::nn::Sequential& model, Optimizer& opt, const at::Tensor& x,
                const at::Tensor& y) {
  opt.zero_grad();
  at::mse_loss(model->forward(x), y).backward();
  opt.step();
}

/// Whether this runs on the libtorch of the Python oracle (the pinned wheel), whose kernels give
/// Python's bits; another libtorch (Debian's 1.13) rounds the model's forward and backward
/// differently in the last bits.
bool same_libtorch_as_python() {
  static const bool same = [] {
    const std::string command = std::string("\"") + MODHOOKS_PYTHON +
                                "\" -c \"import torch; print(torch.__version__.split('+')[0])\"";
    std::FILE* pipe = popen(command.c_str(), "r");
    char version[64] = {};
    if (pipe == nullptr) return false;
    const bool read = std::fgets(version, sizeof version, pipe) != nullptr;
    pclose(pipe);
    const std::string ours = std::to_string(TORCH_VERSION_MAJOR) + "." +
                             std::to_string(TORCH_VERSION_MINOR) + "." +
                             std::to_string(TORCH_VERSION_PATCH) + "\n";
    return read && ours == version;
  }();
  return same;
}

class PythonOptimizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
  /// libtorch's Adam and AdamW update their first moment with mul_ + add_ where Python uses
  /// lerp_: the last bits differ; the others (modhooks' Adam and AdamW among them) compute what
  /// Python computes, operation for operation, and give its bits on the same libtorch.
  bool exact() const {
    return same_libtorch_as_python() && GetParam() != "adam" && GetParam() != "adamw";
  }
  /// How resume_optim.py compares: bit for bit, or within Adam's or another libtorch's rounding.
  std::string mode() const {
    if (exact()) return "exact";
    return same_libtorch_as_python() ? "close" : "other-libtorch";
  }
  double rtol() const { return same_libtorch_as_python() ? 2e-6 : 1e-5; }
  double atol() const { return same_libtorch_as_python() ? 1e-7 : 1e-6; }
  void expect_params(const torch::nn::Sequential& model, const IValue& want, int step) const {
    const auto params = model->parameters();
    const auto expected = want.toTensorVector();
    ASSERT_EQ(params.size(), expected.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (exact()) {
        EXPECT_TRUE(at::equal(params[i], expected[i]))
            << GetParam() << " step " << step << " parameter " << i << " differs by "
            << (params[i] - expected[i]).abs().max().item<double>();
      } else {
        EXPECT_TRUE(at::allclose(params[i], expected[i], rtol(), atol()))
            << GetParam() << " step " << step << " parameter " << i << " differs by "
            << (params[i] - expected[i]).abs().max().item<double>();
      }
    }
  }
};

// Python trains RESUME steps and saves; libtorch resumes and must give Python's parameters at
// every later step. Then libtorch saves after two more steps and Python resumes that.
TEST_P(PythonOptimizer, ResumesPythonsRunStepByStepAndPythonResumesOurs) {
  const std::string name = python_name(GetParam());
  const IValue data = modhooks::load_object(fixture("data.pt"));
  const auto x = at(data, "x").toTensor();
  const auto y = at(data, "y").toTensor();
  const IValue ckpt = modhooks::load_object(fixture(name + ".pt"));
  const auto expected =
      at(modhooks::load_object(fixture(name + "_expected.pt")), "params").toList();
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps));

  auto model = make_model();
  modhooks::load_state_dict(model, modhooks::StateDict::from(at(ckpt, "model")));
  auto opt = make_optimizer(GetParam(), model);
  modhooks::optim::load_state_dict(*opt, at(ckpt, "optimizer"));
  EXPECT_EQ(at(ckpt, "epoch").toInt(), kResume);
  const int handoff = kResume + 2;
  for (int s = kResume; s < kSteps; ++s) {
    train_step(model, *opt, x[s], y[s]);
    expect_params(model, expected.get(s), s + 1);
    if (s + 1 == handoff) {
      c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
      out.insert("model", modhooks::state_dict(model).to_ivalue());
      out.insert("optimizer", modhooks::optim::state_dict(*opt));
      out.insert("epoch", handoff);
      modhooks::save_object(out, fixture("cpp_" + GetParam() + ".pt"));
    }
  }
  const std::string command = std::string("cd \"") + MODHOOKS_TEST_SOURCE_DIR + "/python\" && \"" +
                              MODHOOKS_PYTHON + "\" resume_optim.py \"" + MODHOOKS_FIXTURES +
                              "\" " + name + " \"" + fixture("cpp_" + GetParam() + ".pt") + "\" " +
                              mode();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

// Python's group hyper-parameters replace the optimizer's own, per group.
TEST_P(PythonOptimizer, RestoresEveryGroupsHyperParameters) {
  const std::string name = python_name(GetParam());
  const IValue ckpt = modhooks::load_object(fixture(name + ".pt"));
  auto model = make_model();
  auto opt = make_optimizer(GetParam(), model);
  modhooks::optim::load_state_dict(*opt, at(ckpt, "optimizer"));
  const auto saved = at(at(ckpt, "optimizer"), "param_groups").toList();
  const IValue ours = modhooks::optim::state_dict(*opt);
  const auto groups = at(ours, "param_groups").toList();
  ASSERT_EQ(groups.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    const auto python = saved.get(g).toGenericDict();
    const auto cpp = groups.get(g).toGenericDict();
    // The same keys (Python puts a group's own options first, so the order varies) and the
    // same values (numbers as floats).
    std::vector<std::string> python_keys, cpp_keys;
    for (const auto& e : python) python_keys.push_back(e.key().toStringRef());
    for (const auto& e : cpp) cpp_keys.push_back(e.key().toStringRef());
    EXPECT_EQ(cpp_keys.back(), "params");
    std::sort(python_keys.begin(), python_keys.end());
    std::sort(cpp_keys.begin(), cpp_keys.end());
    EXPECT_EQ(cpp_keys, python_keys);
    for (const auto& e : python) {
      const IValue& want = e.value();
      const IValue got = cpp.at(e.key());
      if (want.isInt() || want.isDouble()) {
        EXPECT_DOUBLE_EQ(got.toDouble(), want.isInt() ? want.toInt() : want.toDouble())
            << name << " group " << g << " " << e.key().toStringRef();
      } else if (want.isTuple()) {
        EXPECT_DOUBLE_EQ(got.toTupleRef().elements()[0].toDouble(),
                         want.toTupleRef().elements()[0].toDouble());
        EXPECT_DOUBLE_EQ(got.toTupleRef().elements()[1].toDouble(),
                         want.toTupleRef().elements()[1].toDouble());
      } else if (want.isList()) {
        EXPECT_EQ(got.toIntVector(), want.toIntVector());
      } else {
        EXPECT_EQ(got, want) << name << " group " << g << " " << e.key().toStringRef();
      }
    }
  }
  // Per-parameter state: Python's names, step as a float32 scalar tensor.
  const auto state = at(ours, "state").toGenericDict();
  const auto python_state = at(at(ckpt, "optimizer"), "state").toGenericDict();
  EXPECT_EQ(state.size(), python_state.size());
  for (const auto& e : python_state) {
    const auto mine = state.at(e.key()).toGenericDict();
    std::vector<std::string> python_keys, cpp_keys;
    for (const auto& k : e.value().toGenericDict()) python_keys.push_back(k.key().toStringRef());
    for (const auto& k : mine) cpp_keys.push_back(k.key().toStringRef());
    EXPECT_EQ(cpp_keys, python_keys) << name << " state " << e.key().toInt();
    if (mine.contains("step")) {
      const auto step = mine.at("step").toTensor();
      EXPECT_EQ(step.scalar_type(), at::kFloat);
      EXPECT_EQ(step.dim(), 0);
      EXPECT_EQ(step.item<float>(), static_cast<float>(kResume));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, PythonOptimizer,
                         ::testing::Values("sgd", "adam", "adamw", "rmsprop", "adagrad",
                                           "python_adam", "python_adamw"),
                         [](const auto& info) { return info.param; });

/// What an optimizer holds, as text, to see that a failed load changed nothing.
std::string snapshot(const Optimizer& opt) {
  std::string out = c10::str(modhooks::optim::state_dict(opt));
  return out;
}

TEST(OptimLoadStateDict, ThrowsLeavingTheOptimizerUnchangedWhenGroupsDiffer) {
  const IValue ckpt = modhooks::load_object(fixture("adam.pt"));
  const IValue python = at(ckpt, "optimizer");
  auto model = make_model();
  // One group of all four parameters: the count differs.
  torch::optim::Adam one(model->parameters(), torch::optim::AdamOptions(0.5));
  model->forward(at::ones({1, 4})).sum().backward();
  one.step();
  const std::string before = snapshot(one);
  EXPECT_ERROR_WITH(modhooks::optim::load_state_dict(one, python), ValueError,
                    "optim.load.group_count_mismatch",
                    "loaded state dict has a different number of parameter groups");
  EXPECT_EQ(snapshot(one), before);

  // Two groups of other sizes.
  torch::optim::Adam two(
      std::vector<torch::optim::OptimizerParamGroup>{
          torch::optim::OptimizerParamGroup({model[0]->parameters()[0]}),
          torch::optim::OptimizerParamGroup(
              {model[0]->parameters()[1], model[2]->parameters()[0], model[2]->parameters()[1]})},
      torch::optim::AdamOptions(0.5));
  two.step();
  const std::string before_two = snapshot(two);
  EXPECT_ERROR_WITH(modhooks::optim::load_state_dict(two, python), ValueError,
                    "optim.load.group_size_mismatch",
                    "loaded state dict contains a parameter group that doesn't match the size "
                    "of optimizer's group");
  EXPECT_EQ(snapshot(two), before_two);
}

TEST(OptimLoadStateDict, ThrowsLeavingTheOptimizerUnchangedOnBadState) {
  auto model = make_model();
  auto opt = make_optimizer("adam", model);
  const std::string before = snapshot(*opt);
  IValue python = at(modhooks::load_object(fixture("adam.pt")), "optimizer");
  // A state tensor of the wrong shape, found after the first group was read.
  auto state = at(python, "state").toGenericDict();
  auto last = state.at(IValue(std::int64_t{3})).toGenericDict();
  last.insert_or_assign("exp_avg", at::ones({5}));
  EXPECT_ERROR_WITH(modhooks::optim::load_state_dict(*opt, python), ValueError,
                    "optim.load.state_size_mismatch",
                    "state[3]['exp_avg'] has size [5] but its parameter [2]");
  EXPECT_EQ(snapshot(*opt), before);
  // maximize, which libtorch's step has not.
  python = at(modhooks::load_object(fixture("adam.pt")), "optimizer");
  at(python, "param_groups").toList().get(1).toGenericDict().insert_or_assign("maximize", true);
  EXPECT_ERROR_WITH(modhooks::optim::load_state_dict(*opt, python), ValueError,
                    "optim.load.unsupported_option", "param_groups[1]['maximize'] is True");
  EXPECT_EQ(snapshot(*opt), before);
  // Python's AdamW state into libtorch's Adam.
  python = at(modhooks::load_object(fixture("adamw.pt")), "optimizer");
  EXPECT_ERROR_WITH(modhooks::optim::load_state_dict(*opt, python), ValueError,
                    "optim.load.adam_kind_mismatch",
                    "decoupled_weight_decay'] is True, which is libtorch's AdamW, not Adam");
  EXPECT_EQ(snapshot(*opt), before);
}

TEST(OptimLoadStateDict, RefusesOtherOptimizers) {
  auto model = make_model();
  torch::optim::LBFGS lbfgs(model->parameters());
  EXPECT_ERROR_WITH(modhooks::optim::state_dict(lbfgs), TypeError, "optim.optimizer.unsupported",
                    "only libtorch's SGD, Adam, AdamW, RMSprop and Adagrad");
}

}  // namespace
