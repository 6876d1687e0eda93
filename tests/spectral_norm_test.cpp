// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/spectral_norm.h: the spectral_norm tests of PyTorch's test/test_nn.py
// ported (TestNN.test_spectral_norm, _dim, _forward, _load_state_dict), and the differential
// scenarios against Python (the upgrade of an old state dict among them).
#include "modhooks/nn/utils/spectral_norm.h"

#include <gtest/gtest.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "nn_utils_patterns.h"
#include "nn_utils_scenarios.h"

namespace {

namespace nu = modhooks::nn::utils;
using nn_utils_scenarios::buffer_of;
using nn_utils_scenarios::parameter_of;
using torch::nn::Linear;

TEST(TestNN, test_spectral_norm) {
  const at::Tensor input = at::randn({3, 5});
  Linear m(5, 7);
  nu::spectral_norm(m);
  EXPECT_EQ(buffer_of(*m, "weight_u").sizes(), (std::vector<std::int64_t>{m->weight.size(0)}));
  EXPECT_TRUE(parameter_of(*m, "weight_orig").defined());  // trainable
  EXPECT_TRUE(buffer_of(*m, "weight_u").defined());
  EXPECT_TRUE(buffer_of(*m, "weight_v").defined());
  EXPECT_FALSE(parameter_of(*m, "weight").defined());  // a plain attribute
  EXPECT_FALSE(buffer_of(*m, "weight").defined());
  // It shares storage with weight_orig until the first forward computes it.
  EXPECT_TRUE(m->weight.is_alias_of(parameter_of(*m, "weight_orig")));
  EXPECT_EQ(m->weight.strides(), parameter_of(*m, "weight_orig").strides());

  nu::remove_spectral_norm(m);
  EXPECT_FALSE(parameter_of(*m, "weight_orig").defined());
  EXPECT_FALSE(buffer_of(*m, "weight_u").defined());
  EXPECT_TRUE(parameter_of(*m, "weight").defined());
  try {
    nu::spectral_norm(m);
    nu::spectral_norm(m);
    FAIL();
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.what(), "Cannot register two spectral_norm hooks on the same parameter weight");
  }
  // Removing: the output stays (no power iteration in the removal).
  const at::Tensor before = modhooks::call(m, input);
  m->eval();
  const at::Tensor eval_before = modhooks::call(m, input);
  nu::remove_spectral_norm(m);
  EXPECT_TRUE(at::allclose(m(input), eval_before));
  EXPECT_EQ(before.sizes(), eval_before.sizes());
}

TEST(TestNN, test_spectral_norm_dim) {
  torch::nn::ConvTranspose2d m(torch::nn::ConvTranspose2dOptions(3, 4, {5, 6}));
  nu::spectral_norm(m);
  modhooks::call(m, at::randn({2, 3, 8, 8}));
  EXPECT_EQ(buffer_of(*m, "weight_u").sizes(),
            (std::vector<std::int64_t>{parameter_of(*m, "weight_orig").size(1)}));
}

TEST(TestNN, test_spectral_norm_forward) {
  namespace F = torch::nn::functional;
  const at::Tensor input = at::randn({3, 5});
  Linear m(5, 7);
  nu::spectral_norm(m);
  // The forward by hand, before the module's (which then does the same power iteration).
  at::Tensor weight = parameter_of(*m, "weight_orig").detach().clone();
  const at::Tensor matrix = weight.view({weight.size(0), -1});
  at::Tensor u = buffer_of(*m, "weight_u").clone();
  at::Tensor v = F::normalize(at::mv(matrix.t(), u), F::NormalizeFuncOptions().dim(0).eps(1e-12));
  u = F::normalize(at::mv(matrix, v), F::NormalizeFuncOptions().dim(0).eps(1e-12));
  weight = weight / at::dot(u, at::matmul(matrix, v));
  const at::Tensor expected = F::linear(input, weight, m->bias);
  EXPECT_TRUE(at::allclose(modhooks::call(m, input), expected));
}

TEST(TestNN, SpectralNormEvalDoesNoPowerIteration) {
  Linear m(5, 7);
  nu::spectral_norm(m);
  m->eval();
  const at::Tensor u = buffer_of(*m, "weight_u").clone();
  modhooks::call(m, at::randn({3, 5}));
  EXPECT_TRUE(at::equal(buffer_of(*m, "weight_u"), u));
  m->train();
  modhooks::call(m, at::randn({3, 5}));
  EXPECT_FALSE(at::equal(buffer_of(*m, "weight_u"), u));
}

TEST(TestNN, SpectralNormStateDictVersion) {
  Linear m(5, 7);
  nu::spectral_norm(m);
  const modhooks::StateDict sd = modhooks::state_dict(m);
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"bias", "weight_orig", "weight_u", "weight_v"}));
  EXPECT_EQ(sd.metadata().at("").at("spectral_norm/weight.version"), 1);
  EXPECT_EQ(sd.metadata().at("").at("version"), 1);
}

TEST(TestNN, SpectralNormErrors) {
  Linear m(5, 7);
  try {
    nu::spectral_norm(m, "weight", 0);
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Expected n_power_iterations to be positive, but got n_power_iterations=0");
  }
  EXPECT_THROW(nu::spectral_norm(m, "weights"), modhooks::KeyError);
  try {
    nu::remove_spectral_norm(m);
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_STREQ(e.id(), "nn.utils.spectral_norm.not_found");
  }
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
}

TEST(TestNN, test_spectral_norm_load_state_dict) {
  // Python's version-none state dict (weight saved, weight_v not), upgraded as Python does.
  const std::string dir = nn_utils_scenarios::oracle_dir();
  const modhooks::StateDict record = modhooks::load(dir + "sn_tall.pt");
  nn_utils_scenarios::Scenario s = nn_utils_scenarios::prepared("sn_tall", record);
  const modhooks::StateDict old = modhooks::load(dir + "sn_old.pt");
  ASSERT_TRUE(old.contains("weight"));
  ASSERT_FALSE(old.contains("weight_v"));
  modhooks::load_state_dict(*s.module, old);
  const modhooks::StateDict expected = modhooks::load(dir + "sn_old_loaded.pt");
  for (const auto& [key, tensor] : modhooks::state_dict(*s.module)) {
    EXPECT_TRUE(nn_utils_scenarios::near(tensor, expected.at(key))) << key;
  }
}

TEST(TestNN, SpectralNormLoadModelAndSaveModel) {
  // Straight between files and the module: the same hooks run (the version written, the
  // upgrade read), so Python's file loads and what save_model writes loads back.
  const std::string dir = nn_utils_scenarios::oracle_dir();
  const modhooks::StateDict record = modhooks::load(dir + "sn_linear.pt");
  nn_utils_scenarios::Scenario s = nn_utils_scenarios::prepared("sn_linear", record);
  modhooks::load_model(*s.module, dir + "sn_linear_sd.pt");
  const modhooks::StateDict python = modhooks::load(dir + "sn_linear_sd.pt");
  for (const auto& [key, tensor] : modhooks::state_dict(*s.module)) {
    EXPECT_TRUE(nn_utils_scenarios::near(tensor, python.at(key))) << key;
  }
  const std::string saved = std::string(MODHOOKS_FIXTURES) + "/nn_utils/cpp_sn_save_model.pt";
  modhooks::save_model(*s.module, saved);
  EXPECT_EQ(modhooks::load(saved).metadata().at("").at("spectral_norm/weight.version"), 1);
  const modhooks::StateDict tall = modhooks::load(dir + "sn_tall.pt");
  nn_utils_scenarios::Scenario again = nn_utils_scenarios::prepared("sn_tall", tall);
  modhooks::load_model(*again.module, dir + "sn_old.pt");  // the upgrade runs here too
  const modhooks::StateDict upgraded = modhooks::load(dir + "sn_old_loaded.pt");
  EXPECT_TRUE(
      nn_utils_scenarios::near(buffer_of(*again.module, "weight_v"), upgraded.at("weight_v")));
}

TEST(TestNN, SpectralNormDifferential) {
  for (const char* name : {"sn_linear", "sn_tall", "sn_conv2d", "sn_convt2d", "sn_embedding"}) {
    nn_utils_scenarios::check_against_python(name);
  }
}

TEST(TestNN, SpectralNormKeptWeightKeepsItsValue) {
  // As in Python: `w = m.weight` after one forward keeps that forward's value after the next
  // (training mode: each forward steps the power iteration, so the values differ).
  Linear m(5, 7);
  nu::spectral_norm(m);
  modhooks::call(m, at::randn({3, 5}));
  const at::Tensor kept = m->weight;
  const at::Tensor value = kept.detach().clone();
  modhooks::call(m, at::randn({3, 5}));
  EXPECT_TRUE(at::equal(kept, value));
  EXPECT_FALSE(kept.is_same(m->weight));
  EXPECT_FALSE(at::equal(m->weight, value));
}

TEST(TestNN, SpectralNormOnATakenNameLeavesTheModuleAsItWas) {
  nn_utils_scenarios::expect_name_taken([](torch::nn::Linear& m) { nu::spectral_norm(m); },
                                        "weight_orig");
  nn_utils_scenarios::expect_name_taken([](torch::nn::Linear& m) { nu::spectral_norm(m); },
                                        "weight_u", /*module=*/true);
}

}  // namespace

// Python's numbers in the patterns people train with (tests/nn_utils_patterns.h).
TEST(TestNN, SpectralNormInTrainingPatterns) { nn_utils_patterns::replay_all({"sn"}); }
