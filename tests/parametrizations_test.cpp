// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/parametrizations.h: the weight_norm and spectral_norm tests of PyTorch's
// test/nn/test_parametrization.py ported, and the differential scenarios against Python.
#include "modhooks/nn/utils/parametrizations.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <tuple>

#include "modhooks/nn/utils/weight_norm.h"
#include "nn_utils_patterns.h"
#include "nn_utils_scenarios.h"

namespace {

namespace nu = modhooks::nn::utils;
using torch::nn::Linear;

TEST(TestNNParametrization, test_weight_norm_parametrization) {
  const at::Tensor input = at::randn({3, 4});
  Linear m(4, 5);
  const at::Tensor expected = m(input);
  nu::parametrizations::weight_norm(m);
  EXPECT_EQ(nn_utils_scenarios::parameter_of(*m, "parametrizations.weight.original1").sizes(),
            m->weight.sizes());
  EXPECT_EQ(nn_utils_scenarios::parameter_of(*m, "parametrizations.weight.original0").sizes(),
            (std::vector<std::int64_t>{5, 1}));
  EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected, 0, 1e-5));
  nu::parametrize::remove_parametrizations(m, "weight");
  EXPECT_TRUE(at::allclose(m(input), expected, 0, 1e-5));
  nu::parametrizations::weight_norm(m, "weight", 1);
  EXPECT_EQ(nn_utils_scenarios::parameter_of(*m, "parametrizations.weight.original0").sizes(),
            (std::vector<std::int64_t>{1, 4}));
  EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected, 0, 1e-5));
}

TEST(TestNNParametrization, test_weight_norm_state_dict_compat) {
  // A state dict of the hook form loads into the parametrization.
  Linear m(4, 5);
  nu::weight_norm(m);
  const modhooks::StateDict old = modhooks::state_dict(m);
  Linear n(4, 5);
  nu::parametrizations::weight_norm(n);
  modhooks::load_state_dict(n, old);
  const at::Tensor input = at::randn({3, 4});
  EXPECT_TRUE(at::allclose(modhooks::call(m, input), modhooks::call(n, input)));
}

TEST(TestNNParametrization, test_new_spectral_norm) {
  const at::Tensor input = at::randn({3, 5});
  Linear m(5, 7);
  nu::parametrizations::spectral_norm(m);
  auto list = nu::parametrize::parametrizations(m, "weight");
  ASSERT_TRUE(list);
  const at::Tensor u = nn_utils_scenarios::buffer_of(*m, "parametrizations.weight.0._u");
  EXPECT_EQ(u.sizes(), (std::vector<std::int64_t>{7}));
  EXPECT_TRUE(nn_utils_scenarios::parameter_of(*m, "parametrizations.weight.original").defined());
  EXPECT_FALSE(m->named_parameters(false).contains("weight"));
  // In eval mode the buffers stay; in training they take a step per forward.
  m->eval();
  const at::Tensor u0 = u.clone();
  modhooks::call(m, input);
  EXPECT_TRUE(at::equal(u, u0));
  // The 15 steps at registration may leave u at its fixed point to the last bit, so the weight
  // moves first: the step in training must then move u. The new weight has singular values 3,
  // 1.5, 1, 0.5, 0.25, so each step shrinks u's error by (1.5 / 3)^2 and 50 steps converge
  // whatever the random bases; a random weight's top two singular values can lie close enough
  // that 50 steps leave its norm 1.5% off (seen on CI).
  m->train();
  {
    at::NoGradGuard no_grad;
    const at::Tensor left = std::get<0>(at::linalg_qr(at::randn({7, 5})));
    const at::Tensor right = std::get<0>(at::linalg_qr(at::randn({5, 5})));
    const at::Tensor sigma = at::tensor({3.0, 1.5, 1.0, 0.5, 0.25}, at::kFloat);
    nn_utils_scenarios::parameter_of(*m, "parametrizations.weight.original")
        .copy_(left.mm(at::diag(sigma)).mm(right.t()));
  }
  modhooks::call(m, input);
  EXPECT_FALSE(at::equal(nn_utils_scenarios::buffer_of(*m, "parametrizations.weight.0._u"), u0));
  // The weight's largest singular value is 1 after enough steps.
  for (int i = 0; i < 50; ++i) modhooks::call(m, input);
  EXPECT_NEAR(at::linalg_matrix_norm(m->weight.detach(), 2).item<double>(), 1.0, 1e-4);
}

TEST(TestNNParametrization, NewSpectralNormErrors) {
  Linear m(5, 7);
  try {
    nu::parametrizations::spectral_norm(m, "weight", 1, 1e-12, 2);
    FAIL();
  } catch (const modhooks::IndexError& e) {
    EXPECT_STREQ(e.what(), "Dimension out of range (expected to be in range of [-2, 1] but got 2)");
  }
  EXPECT_THROW(nu::parametrizations::spectral_norm(m, "weights"), modhooks::ValueError);
  EXPECT_THROW(nu::parametrizations::spectral_norm(m, "weight", 0), modhooks::ValueError);
  EXPECT_FALSE(nu::parametrize::is_parametrized(m));
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
}

TEST(TestNNParametrization, Differential) {
  for (const char* name : {"pwn_conv1d", "psn_linear", "psn_conv2d"}) {
    nn_utils_scenarios::check_against_python(name);
  }
}

}  // namespace

// Python's numbers in the patterns people train with (tests/nn_utils_patterns.h).
TEST(TestNNParametrization, InTrainingPatterns) {
  nn_utils_patterns::replay_all({"pwn", "psn", "mixed"});
}
