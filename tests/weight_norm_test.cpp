// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/weight_norm.h: the weight_norm tests of PyTorch's test/test_nn.py ported
// (TestNN.test_weight_norm), and the differential scenarios against Python.
#include "modhooks/nn/utils/weight_norm.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "nn_utils_patterns.h"
#include "nn_utils_scenarios.h"

namespace {

namespace nu = modhooks::nn::utils;
using torch::nn::Linear;

bool has(const torch::nn::Module& m, const std::string& name) {
  return m.named_parameters(false).contains(name);
}

TEST(TestNN, test_weight_norm) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    // PyTorch's own tolerances for this test (test_nn.py's dtype2prec_DONTUSE). bfloat16 keeps 8
    // significant bits: between 2 and 4 its values are 1/64 apart, so an output that rounds one
    // step differently once the weight is g * v / ||v|| is already off by more than 1e-2, and
    // whether it does depends on the machine's bfloat16 kernels.
    const double atol = dtype == at::kFloat ? 1e-5 : 1e-1;
    const at::Tensor input = at::randn({3, 4}).to(dtype);
    Linear m(4, 5);
    m->to(dtype);
    const at::Tensor expected = m(input);
    nu::weight_norm(m);
    EXPECT_EQ(m->named_parameters()["weight_v"].sizes(), m->weight.sizes());
    EXPECT_EQ(m->named_parameters()["weight_g"].sizes(), (std::vector<std::int64_t>{5, 1}));
    EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected, 0, atol));
    nu::remove_weight_norm(m);
    EXPECT_FALSE(has(*m, "weight_g"));
    EXPECT_FALSE(has(*m, "weight_v"));
    EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected, 0, atol));
    nu::weight_norm(m, "weight", 1);
    EXPECT_EQ(m->named_parameters()["weight_v"].sizes(), m->weight.sizes());
    EXPECT_EQ(m->named_parameters()["weight_g"].sizes(), (std::vector<std::int64_t>{1, 4}));
    EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected, 0, atol));

    Linear n(4, 5);
    n->to(dtype);
    const at::Tensor expected_n = n(input);
    nu::weight_norm(n, "weight", std::nullopt);
    EXPECT_TRUE(at::allclose(modhooks::call(n, input), expected_n, 0, atol));
    EXPECT_THROW(nu::weight_norm(n), modhooks::RuntimeError);
  }
  // Half: the forward may not run on CPU, but registering must work (done before moving to a GPU).
  Linear half(4, 5);
  half->to(at::kHalf);
  nu::weight_norm(half);
}

TEST(TestNN, WeightNormErrors) {
  Linear m(4, 5);
  nu::weight_norm(m);
  try {
    nu::weight_norm(m);
    FAIL();
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.what(), "Cannot register two weight_norm hooks on the same parameter weight");
    EXPECT_STREQ(e.id(), "nn.utils.weight_norm.twice");
  }
  try {
    nu::remove_weight_norm(m, "bias");
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "weight_norm of 'bias' not found in torch::nn::Linear(in_features=4, "
              "out_features=5, bias=true)");
  }
  Linear n(4, 5);
  EXPECT_THROW(nu::weight_norm(n, "weights"), modhooks::AttributeError);
  EXPECT_EQ(n->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  // A module no shared_ptr owns cannot hold the hook: refused before anything changes.
  torch::nn::LinearImpl unowned(4, 5);
  EXPECT_THROW(nu::weight_norm(unowned), modhooks::RuntimeError);
  EXPECT_EQ(unowned.named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
}

TEST(TestNN, WeightNormNamesAndGrad) {
  // Python's layout: weight leaves the parameters, weight_g and weight_v are appended; the
  // member forward reads is the recomputed (interior) tensor, and gradients reach g and v.
  Linear m(3, 2);
  nu::weight_norm(m);
  EXPECT_EQ(m->named_parameters().keys(),
            (std::vector<std::string>{"bias", "weight_g", "weight_v"}));
  EXPECT_EQ(modhooks::state_dict(m).keys(),
            (std::vector<std::string>{"bias", "weight_g", "weight_v"}));
  modhooks::call(m, at::randn({4, 3})).sum().backward();
  EXPECT_FALSE(m->weight.is_leaf());
  EXPECT_TRUE(m->named_parameters()["weight_g"].grad().defined());
  EXPECT_TRUE(m->named_parameters()["weight_v"].grad().defined());
  nu::remove_weight_norm(m);
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_TRUE(m->weight.is_leaf());
}

TEST(TestNN, WeightNormRecomputesBeforeEachForward) {
  Linear m(3, 2);
  nu::weight_norm(m);
  {
    at::NoGradGuard no_grad;
    m->named_parameters()["weight_g"].mul_(2);
  }
  const at::Tensor before = m->weight.detach().clone();
  modhooks::call(m, at::randn({1, 3}));
  EXPECT_TRUE(at::allclose(m->weight, before * 2));
}

TEST(TestNN, WeightNormOnModhooksHolders) {
  // A hook-aware holder runs the hooks from its own operator(): the weight is recomputed there.
  modhooks::nn::Linear m(3, 2);
  nu::weight_norm(m);
  {
    at::NoGradGuard no_grad;
    m->named_parameters()["weight_g"].mul_(3);
  }
  const at::Tensor before = m->weight.detach().clone();
  m(at::randn({1, 3}));
  EXPECT_TRUE(at::allclose(m->weight, before * 3));
}

TEST(TestNN, WeightNormDifferential) {
  for (const char* name : {"wn_linear", "wn_conv1d_none"})
    nn_utils_scenarios::check_against_python(name);
}

TEST(TestNN, WeightNormOnATakenNameLeavesTheModuleAsItWas) {
  for (const char* taken : {"weight_g", "weight_v"}) {
    nn_utils_scenarios::expect_name_taken([](torch::nn::Linear& m) { nu::weight_norm(m); }, taken);
  }
}

}  // namespace

// Python's numbers in the patterns people train with (tests/nn_utils_patterns.h).
TEST(TestNN, WeightNormInTrainingPatterns) { nn_utils_patterns::replay_all({"wn"}); }
