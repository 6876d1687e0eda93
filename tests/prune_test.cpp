// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/prune.h: PyTorch's test/nn/test_pruning.py ported (TestPruningNN, the
// methods named after theirs), and the differential scenarios against Python.
#include "modhooks/nn/utils/prune.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "nn_utils_patterns.h"
#include "nn_utils_scenarios.h"

namespace {

namespace prune = modhooks::nn::utils::prune;
using torch::nn::Linear;

void assign(at::Tensor tensor, const at::Tensor& value) {
  at::NoGradGuard no_grad;
  tensor.copy_(value);
}
bool same_values(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a, b.to(a.scalar_type()));
}

/// A method that returns a fixed mask (what the Python tests do with mock.patch).
class FixedMask final : public prune::BasePruningMethod {
 public:
  explicit FixedMask(at::Tensor mask) : mask_(std::move(mask)) {}
  prune::PruningType pruning_type() const override { return prune::PruningType::kUnstructured; }
  at::Tensor compute_mask(const at::Tensor&, const at::Tensor&) const override { return mask_; }

 private:
  at::Tensor mask_;
};

/// Prunes the weight of test_random_pruning*'s Linear(5, 2) with a FixedMask holding `fill`
/// everywhere but at [1][0] and [0][3], which hold 1 - fill; returns the mask.
at::Tensor apply_fixed_mask(Linear& m, int fill) {
  at::Tensor mask = at::full_like(m->weight, fill);
  mask.index_put_({1, 0}, 1 - fill);
  mask.index_put_({0, 3}, 1 - fill);
  prune::apply(m, "weight", std::make_shared<FixedMask>(mask));
  return mask;
}

/// A method whose compute_mask throws (test_pruning_rollback's mock).
class Throws final : public prune::BasePruningMethod {
 public:
  prune::PruningType pruning_type() const override { return prune::PruningType::kUnstructured; }
  at::Tensor compute_mask(const at::Tensor&, const at::Tensor&) const override {
    throw std::runtime_error("HA!");
  }
};

std::vector<std::shared_ptr<torch::nn::Module>> modules_of_the_tests() {
  return {Linear(5, 7).ptr(), torch::nn::Conv3d(torch::nn::Conv3dOptions(2, 2, 2)).ptr()};
}

TEST(TestPruningNN, test_validate_pruning_amount_init) {
  EXPECT_THROW(prune::Amount(1.1), modhooks::ValueError);
  EXPECT_THROW(prune::Amount(20.0), modhooks::ValueError);
  EXPECT_THROW(prune::Amount(-10), modhooks::ValueError);
  for (prune::Amount ok : {prune::Amount(0.34), prune::Amount(1500), prune::Amount(0),
                           prune::Amount(0.0), prune::Amount(1), prune::Amount(1.0)}) {
    (void)ok;
  }
  EXPECT_EQ(expect_error<modhooks::ValueError>([] { prune::Amount(1.5); }, "nn.utils.prune.amount"),
            "amount=1.5 should either be a float in the range [0, 1] or a non-negative integer");
  EXPECT_EQ(expect_error<modhooks::ValueError>([] { prune::Amount(-3); }, "nn.utils.prune.amount"),
            "amount=-3 should either be a float in the range [0, 1] or a non-negative integer");
}

TEST(TestPruningNN, test_validate_pruning_amount) {
  EXPECT_THROW(prune::Amount(20).check(19), modhooks::ValueError);
  prune::Amount(0.3).check(0);
  prune::Amount(19).check(20);
  prune::Amount(0).check(0);
  prune::Amount(1).check(1);
}

TEST(TestPruningNN, test_compute_nparams_to_prune) {
  EXPECT_EQ(prune::Amount(0).of(15), 0);
  EXPECT_EQ(prune::Amount(10).of(15), 10);
  EXPECT_EQ(prune::Amount(1).of(15), 1);
  EXPECT_EQ(prune::Amount(1.0).of(15), 15);
  EXPECT_EQ(prune::Amount(0.4).of(17), 7);
  // Python's round() takes halves to even: 0.5 of 5 is 2, 0.5 of 7 is 4.
  EXPECT_EQ(prune::Amount(0.5).of(5), 2);
  EXPECT_EQ(prune::Amount(0.5).of(7), 4);
}

TEST(TestPruningNN, test_random_pruning_sizes_orig_new_weight) {
  // test_random_pruning_sizes, test_random_pruning_orig, test_random_pruning_new_weight.
  for (const auto& m : modules_of_the_tests()) {
    for (const std::string name : {"weight", "bias"}) {
      const at::Tensor original = nn_utils_scenarios::parameter_of(*m, name).detach().clone();
      prune::random_unstructured(m, name, 0.1);
      EXPECT_EQ(nn_utils_scenarios::buffer_of(*m, name + "_mask").sizes(), original.sizes());
      EXPECT_EQ(nn_utils_scenarios::parameter_of(*m, name + "_orig").sizes(), original.sizes());
      EXPECT_TRUE(at::equal(nn_utils_scenarios::parameter_of(*m, name + "_orig"), original));
      const at::Tensor pruned = modhooks::nn::utils::detail::get_tensor(*m, name);
      EXPECT_EQ(pruned.sizes(), original.sizes());
      EXPECT_TRUE(at::equal(pruned, nn_utils_scenarios::parameter_of(*m, name + "_orig") *
                                        nn_utils_scenarios::buffer_of(*m, name + "_mask")));
    }
  }
}

TEST(TestPruningNN, test_identity_pruning) {
  const at::Tensor input = at::ones({1, 5});
  Linear m(5, 2);
  const at::Tensor before = m(input);
  before.sum().backward();
  const at::Tensor old_grad_weight = m->weight.grad().clone();
  const at::Tensor old_grad_bias = m->bias.grad().clone();
  EXPECT_TRUE(at::equal(old_grad_weight, at::ones_like(m->weight)));
  m->zero_grad();
  prune::identity(m, "weight");
  const at::Tensor after = modhooks::call(m, input);
  EXPECT_TRUE(at::equal(before, after));
  after.sum().backward();
  EXPECT_TRUE(
      at::equal(old_grad_weight, nn_utils_scenarios::parameter_of(*m, "weight_orig").grad()));
  EXPECT_TRUE(at::equal(old_grad_bias, m->bias.grad()));
  EXPECT_TRUE(at::equal(modhooks::call(m, input), modhooks::call(m, input)));
}

TEST(TestPruningNN, test_pruning_id_consistency) {
  // Pruning keeps the Parameter (its TensorImpl) a pre-existing optimizer points at.
  Linear m(torch::nn::LinearOptions(5, 2).bias(false));
  const c10::TensorImpl* tensor_id = m->parameters().at(0).unsafeGetTensorImpl();
  prune::random_unstructured(m, "weight", 0.9);
  EXPECT_EQ(tensor_id, m->parameters().at(0).unsafeGetTensorImpl());
  prune::remove(m, "weight");
  EXPECT_EQ(tensor_id, m->parameters().at(0).unsafeGetTensorImpl());
}

TEST(TestPruningNN, test_random_pruning_0perc) {
  const at::Tensor input = at::ones({1, 5});
  Linear m(5, 2);
  const at::Tensor before = m(input);
  m->zero_grad();
  prune::apply(m, "weight", std::make_shared<FixedMask>(at::ones_like(m->weight)));
  const at::Tensor after = modhooks::call(m, input);
  EXPECT_TRUE(at::equal(before, after));
  after.sum().backward();
  EXPECT_TRUE(at::equal(nn_utils_scenarios::parameter_of(*m, "weight_orig").grad(),
                        at::ones_like(m->weight)));
}

TEST(TestPruningNN, test_random_pruning) {
  const at::Tensor input = at::ones({1, 5});
  Linear m(5, 2);
  const at::Tensor mask = apply_fixed_mask(m, 1);
  modhooks::call(m, input).sum().backward();
  // weight_orig is the parameter: it accumulates the grad, zero where masked.
  EXPECT_TRUE(at::equal(nn_utils_scenarios::parameter_of(*m, "weight_orig").grad(), mask));
  EXPECT_TRUE(at::equal(m->bias.grad(), at::ones_like(m->bias)));
  const at::Tensor old = nn_utils_scenarios::parameter_of(*m, "weight_orig").detach().clone();
  {
    at::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.sub_(p.grad());
  }
  EXPECT_TRUE(at::equal(old[1][0], nn_utils_scenarios::parameter_of(*m, "weight_orig")[1][0]));
  EXPECT_TRUE(at::equal(old[0][3], nn_utils_scenarios::parameter_of(*m, "weight_orig")[0][3]));
}

TEST(TestPruningNN, test_random_pruning_forward) {
  const at::Tensor input = at::ones({1, 5});
  Linear m(5, 2);
  apply_fixed_mask(m, 0);
  const at::Tensor yhat = modhooks::call(m, input);
  const at::Tensor orig = nn_utils_scenarios::parameter_of(*m, "weight_orig");
  EXPECT_TRUE(at::allclose(yhat[0][0], orig[0][3] + m->bias[0]));
  EXPECT_TRUE(at::allclose(yhat[0][1], orig[1][0] + m->bias[1]));
}

TEST(TestPruningNN, test_remove_pruning_forward) {
  const at::Tensor input = at::ones({1, 5});
  Linear m(5, 2);
  apply_fixed_mask(m, 1);
  const at::Tensor pruned = modhooks::call(m, input);
  prune::remove(m, "weight");
  EXPECT_TRUE(at::equal(pruned, modhooks::call(m, input)));
  EXPECT_TRUE(at::equal(pruned, m(input)));  // the member holds the pruned weight as a leaf
  EXPECT_TRUE(m->weight.is_leaf());
  EXPECT_TRUE(m->weight.requires_grad());
}

TEST(TestPruningNN, test_multiple_pruning_calls) {
  torch::nn::Conv3d m(torch::nn::Conv3dOptions(2, 2, 2));
  prune::l1_unstructured(m, "weight", 0.1);
  const at::Tensor mask0 = nn_utils_scenarios::buffer_of(*m, "weight_mask").clone();
  prune::ln_structured(m, "weight", 0.3, 2.0, 0);
  EXPECT_TRUE(at::all(nn_utils_scenarios::buffer_of(*m, "weight_mask").index({mask0 == 0}) == 0)
                  .item<bool>());
  prune::ln_structured(m, "weight", 0.1, INFINITY, 1);
  EXPECT_TRUE(at::all(nn_utils_scenarios::buffer_of(*m, "weight_mask").index({mask0 == 0}) == 0)
                  .item<bool>());
  // Still one pruned tensor, one pre-hook: the masks combine.
  EXPECT_EQ(m->named_parameters(false).keys(), (std::vector<std::string>{"bias", "weight_orig"}));
  EXPECT_EQ(m->named_buffers(false).keys(), (std::vector<std::string>{"weight_mask"}));
}

TEST(TestPruningNN, test_pruning_container_compute_mask) {
  prune::PruningContainer container;
  EXPECT_EQ(container.size(), 0u);
  container.add_pruning_method(std::make_shared<prune::L1UnstructuredMethod>(2));
  const at::Tensor t = at::tensor({1, 2, 3, 4, 5, 6, 7, 8}, at::kFloat).reshape({2, 4});
  const at::Tensor default_mask = at::tensor({1, 1, 1, 0, 1, 1, 0, 1}).reshape({2, 4});
  EXPECT_TRUE(same_values(container.compute_mask(t, default_mask),
                          at::tensor({0, 0, 1, 0, 1, 1, 0, 1}).reshape({2, 4})));
  container.add_pruning_method(std::make_shared<prune::LnStructuredMethod>(1, 2.0, 0));
  EXPECT_TRUE(same_values(container.compute_mask(t, default_mask),
                          at::tensor({0, 0, 0, 0, 1, 1, 0, 1}).reshape({2, 4})));
  container.add_pruning_method(std::make_shared<prune::LnStructuredMethod>(1, 2.0, 1));
  EXPECT_TRUE(same_values(container.compute_mask(t, default_mask),
                          at::tensor({0, 1, 1, 0, 0, 1, 0, 1}).reshape({2, 4})));
}

TEST(TestPruningNN, test_l1_unstructured_pruning) {
  Linear m(4, 2);
  assign(m->weight, at::tensor({1, 2, 3, 4, -4, -3, -2, -1}, at::kFloat).reshape({2, 4}));
  prune::l1_unstructured(m, "weight", 2);
  EXPECT_TRUE(same_values(m->weight, at::tensor({0, 2, 3, 4, -4, -3, -2, 0}).reshape({2, 4})));
  prune::l1_unstructured(m, "weight", 2);
  EXPECT_TRUE(same_values(m->weight, at::tensor({0, 0, 3, 4, -4, -3, 0, 0}).reshape({2, 4})));
}

TEST(TestPruningNN, test_l1_unstructured_pruning_with_importance_scores) {
  Linear m(4, 2);
  assign(m->weight, at::tensor({1, 2, 3, 4, -4, -3, -2, -1}, at::kFloat).reshape({2, 4}));
  const at::Tensor scores = at::tensor({4, 2, 1, 3, -3, -1, -2, -4}, at::kFloat).reshape({2, 4});
  prune::l1_unstructured(m, "weight", 2, scores);
  EXPECT_TRUE(same_values(m->weight, at::tensor({1, 2, 0, 4, -4, 0, -2, -1}).reshape({2, 4})));
  prune::l1_unstructured(m, "weight", 2, scores);
  EXPECT_TRUE(same_values(m->weight, at::tensor({1, 0, 0, 4, -4, 0, 0, -1}).reshape({2, 4})));
}

TEST(TestPruningNN, test_unstructured_pruning_same_magnitude) {
  prune::L1UnstructuredMethod p(0.2);
  const at::Tensor t = 2 * at::randint(-1, 2, {10, 7});
  const at::Tensor mask = p.compute_mask(t, at::ones_like(t));
  EXPECT_EQ((mask == 0).sum().item<std::int64_t>(), prune::Amount(0.2).of(t.numel()));
}

TEST(TestPruningNN, test_random_structured_pruning_amount) {
  prune::RandomStructuredMethod p(0.6, 2);
  const at::Tensor t = (2 * at::randint(-1, 2, {5, 4, 2})).to(at::kFloat);
  const at::Tensor sums =
      std::get<0>(at::sort((p.compute_mask(t, at::ones_like(t)) == 0).sum(at::IntArrayRef{0, 1})));
  EXPECT_TRUE(same_values(sums, at::tensor({0, 20})));
}

at::Tensor ln_test_weight() {
  return at::tensor({1.0, 2.0, 1.0, 2.5, 0.5, 1.0, 0.1, 0.1, -3.0, -5.0, 0.1, -1.0}, at::kFloat)
      .reshape({1, 3, 2, 2});
}

TEST(TestPruningNN, test_ln_structured_pruning) {
  torch::nn::Conv2d m(torch::nn::Conv2dOptions(3, 1, 2));
  assign(m->weight, ln_test_weight());
  at::Tensor expected = at::ones_like(m->weight);
  expected.index_put_({at::indexing::Slice(), 1}, 0);
  prune::ln_structured(m, "weight", 1, 2.0, 1);
  EXPECT_TRUE(same_values(nn_utils_scenarios::buffer_of(*m, "weight_mask"), expected));
  expected.index_put_({at::indexing::Slice(), at::indexing::Slice(), at::indexing::Slice(), 0}, 0);
  prune::ln_structured(m, "weight", 1, 1.0, -1);
  EXPECT_TRUE(same_values(nn_utils_scenarios::buffer_of(*m, "weight_mask"), expected));
}

TEST(TestPruningNN, test_ln_structured_pruning_importance_scores) {
  torch::nn::Conv2d m(torch::nn::Conv2dOptions(3, 1, 2));
  assign(m->weight, ln_test_weight());
  const at::Tensor scores =
      at::tensor({10.0, 1.0, 10.0, 1.0, 30.0, 3.0, 30.0, 3.0, -20.0, -2.0, -20.0, -2.0}, at::kFloat)
          .reshape({1, 3, 2, 2});
  at::Tensor expected = at::ones_like(m->weight);
  expected.index_put_({at::indexing::Slice(), 0}, 0);
  prune::ln_structured(m, "weight", 1, 2.0, 1, scores);
  EXPECT_TRUE(same_values(nn_utils_scenarios::buffer_of(*m, "weight_mask"), expected));
  expected.index_put_({at::indexing::Slice(), at::indexing::Slice(), at::indexing::Slice(), 1}, 0);
  prune::ln_structured(m, "weight", 1, 1.0, -1, scores);
  EXPECT_TRUE(same_values(nn_utils_scenarios::buffer_of(*m, "weight_mask"), expected));
}

TEST(TestPruningNN, test_remove_pruning) {
  for (const auto& m : modules_of_the_tests()) {
    for (const std::string name : {"weight", "bias"}) {
      prune::random_unstructured(m, name, 0.5);
      EXPECT_TRUE(nn_utils_scenarios::parameter_of(*m, name + "_orig").defined());
      EXPECT_TRUE(nn_utils_scenarios::buffer_of(*m, name + "_mask").defined());
      EXPECT_FALSE(nn_utils_scenarios::parameter_of(*m, name).defined());
      const at::Tensor pruned = modhooks::nn::utils::detail::get_tensor(*m, name).detach().clone();
      prune::remove(m, name);
      EXPECT_TRUE(nn_utils_scenarios::parameter_of(*m, name).defined());
      EXPECT_FALSE(nn_utils_scenarios::parameter_of(*m, name + "_orig").defined());
      EXPECT_FALSE(nn_utils_scenarios::buffer_of(*m, name + "_mask").defined());
      EXPECT_TRUE(at::equal(nn_utils_scenarios::parameter_of(*m, name), pruned));
    }
  }
}

TEST(TestPruningNN, test_remove_pruning_exception) {
  for (const auto& m : modules_of_the_tests()) {
    for (const std::string name : {"weight", "bias"}) {
      EXPECT_FALSE(prune::is_pruned(m));
      EXPECT_THROW(prune::remove(m, name), modhooks::ValueError);
    }
  }
  Linear m(2, 1);
  EXPECT_EQ(expect_error<modhooks::ValueError>([&] { prune::remove(m, "weight"); },
                                               "nn.utils.prune.not_pruned"),
            "Parameter 'weight' of module torch::nn::Linear(in_features=2, out_features=1, "
            "bias=true) has to be pruned before pruning can be removed");
}

TEST(TestPruningNN, test_global_pruning) {
  Linear m(4, 2), n(3, 1);
  assign(m->weight, at::tensor({1, 2, 3, 4, -4, -3, -2, -1}, at::kFloat).reshape({2, 4}));
  assign(n->weight, at::tensor({0.0, 0.1, -2.0}, at::kFloat).reshape({1, 3}));
  prune::global_unstructured({{m, "weight"}, {n, "weight"}}, prune::L1Unstructured, 4);
  EXPECT_TRUE(same_values(m->weight, at::tensor({0, 2, 3, 4, -4, -3, -2, 0}).reshape({2, 4})));
  EXPECT_TRUE(same_values(n->weight, at::tensor({0, 0, -2}).reshape({1, 3})));
}

TEST(TestPruningNN, test_global_pruning_importance_scores) {
  Linear m(4, 2), n(3, 1);
  assign(m->weight, at::tensor({1, 2, 3, 4, -4, -3, -2, -1}, at::kFloat).reshape({2, 4}));
  assign(n->weight, at::tensor({0.0, 0.1, -2.0}, at::kFloat).reshape({1, 3}));
  const std::vector<at::Tensor> scores{
      at::tensor({4, 2, 1, 3, -3, -1, -2, -4}, at::kFloat).reshape({2, 4}),
      at::tensor({0.0, 10.0, -0.2}, at::kFloat).reshape({1, 3})};
  prune::global_unstructured({{m, "weight"}, {n, "weight"}}, prune::L1Unstructured, 4, scores);
  EXPECT_TRUE(same_values(m->weight, at::tensor({1, 2, 0, 4, -4, 0, -2, -1}).reshape({2, 4})));
  EXPECT_TRUE(same_values(n->weight, at::tensor({0.0, 0.1, 0.0}).reshape({1, 3})));
}

TEST(TestPruningNN, test_custom_from_mask_pruning) {
  const at::Tensor mask = at::tensor({0, 1, 1, 0, 0, 0, 1, 1}).reshape({2, 4});
  const at::Tensor default_mask = at::tensor({0, 0, 0, 0, 1, 1, 1, 1}).reshape({2, 4});
  const at::Tensor t = at::rand_like(mask.to(at::kFloat));
  prune::CustomFromMaskMethod p(mask);
  EXPECT_TRUE(same_values(p.compute_mask(t, default_mask),
                          at::tensor({0, 0, 0, 0, 0, 0, 1, 1}).reshape({2, 4})));
}

TEST(TestPruningNN, test_pruning_rollback) {
  for (const auto& m : modules_of_the_tests()) {
    for (const std::string name : {"weight", "bias"}) {
      EXPECT_THROW(prune::apply(m, name, std::make_shared<Throws>()), std::runtime_error);
      EXPECT_TRUE(nn_utils_scenarios::parameter_of(*m, name).defined());
      EXPECT_FALSE(nn_utils_scenarios::buffer_of(*m, name + "_mask").defined());
      EXPECT_FALSE(nn_utils_scenarios::parameter_of(*m, name + "_orig").defined());
    }
  }
}

TEST(TestPruningNN, SecondPruningRollsBack) {
  // Beyond Python, whose container keeps the failed method and loses its hook: the first
  // pruning stays as it was.
  Linear m(5, 7);
  prune::l1_unstructured(m, "weight", 0.3);
  const at::Tensor mask = nn_utils_scenarios::buffer_of(*m, "weight_mask").clone();
  EXPECT_THROW(prune::apply(m, "weight", std::make_shared<Throws>()), std::runtime_error);
  EXPECT_TRUE(at::equal(nn_utils_scenarios::buffer_of(*m, "weight_mask"), mask));
  assign(nn_utils_scenarios::parameter_of(*m, "weight_orig"), at::ones({7, 5}));
  modhooks::call(m, at::ones({1, 5}));
  EXPECT_TRUE(at::equal(m->weight, mask));  // the hook still recomputes
}

TEST(TestPruningNN, test_pruning_serialization_state_dict) {
  modhooks::Sequential model(Linear(10, 10), torch::nn::ReLU(), Linear(10, 1));
  EXPECT_TRUE(modhooks::state_dict(model).contains("0.weight"));
  prune::l1_unstructured(model->ptr(0), "weight", 0.9);
  const auto sd = modhooks::state_dict(model);
  EXPECT_TRUE(sd.contains("0.weight_orig"));
  EXPECT_TRUE(sd.contains("0.weight_mask"));
  EXPECT_FALSE(sd.contains("0.weight"));
  // A fresh model pruned the same way loads it (Python's test_pruning_serialization_state_dict).
  modhooks::Sequential fresh(Linear(10, 10), torch::nn::ReLU(), Linear(10, 1));
  prune::identity(fresh->ptr(0), "weight");
  modhooks::load_state_dict(fresh, sd);
  const at::Tensor x = at::randn({2, 10});
  EXPECT_TRUE(at::equal(fresh->forward(x), model->forward(x)));
  prune::remove(model->ptr(0), "weight");
  EXPECT_EQ(modhooks::state_dict(model).keys(),
            (std::vector<std::string>{"0.bias", "0.weight", "2.weight", "2.bias"}));
}

TEST(TestPruningNN, IsPrunedReachesSubmodules) {
  modhooks::Sequential model(Linear(3, 3), Linear(3, 3));
  EXPECT_FALSE(prune::is_pruned(model));
  prune::random_unstructured(model->ptr(1), "bias", 1);
  EXPECT_TRUE(prune::is_pruned(model));
  EXPECT_FALSE(prune::is_pruned(model->ptr(0)));
}

TEST(TestPruningNN, ErrorsWithPythonTexts) {
  Linear m(4, 2);
  EXPECT_EQ(expect_error<modhooks::AttributeError>(
                [&] { prune::l1_unstructured(m, "weights", 0.2); }, "nn.utils.no_attribute"),
            "'Linear' object has no attribute 'weights'");
  EXPECT_EQ(expect_error<modhooks::ValueError>([&] { prune::l1_unstructured(m, "weight", 9); },
                                               "nn.utils.prune.amount"),
            "amount=9 should be smaller than the number of parameters to prune=8");
  EXPECT_THROW(prune::ln_structured(m, "bias", 1, 2.0, 0), modhooks::ValueError);  // 1-D
  EXPECT_THROW(prune::ln_structured(m, "weight", 1, 2.0, 2), modhooks::IndexError);
  EXPECT_THROW(prune::global_unstructured({{m, "weight"}}, prune::RandomStructured, 0.2),
               modhooks::TypeError);
  // Nothing of these changed the module.
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(m->named_buffers().is_empty());
}

TEST(NnUtilsContract, TheSpellingsOfApiMdCompileAndRun) {
  // shared/design/API.md's block for these utilities, as it is written there.
  namespace nu = modhooks::nn::utils;
  using nn_utils_scenarios::Symmetric;
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 4, 3));
  Linear fc(4, 4), fc1(4, 3), fc2(3, 2);
  const at::Tensor mask = at::ones({4, 4});
  nu::weight_norm(conv, "weight", /*dim=*/0);
  nu::remove_weight_norm(conv, "weight");
  nu::spectral_norm(fc, "weight", /*n_power_iterations=*/1, /*eps=*/1e-12, /*dim=*/0);
  nu::remove_spectral_norm(fc, "weight");
  nu::parametrizations::weight_norm(conv, "weight", 0);
  nu::parametrizations::spectral_norm(fc, "weight");
  nu::parametrize::register_parametrization(fc, "weight", Symmetric());
  bool p = nu::parametrize::is_parametrized(fc, "weight");
  nu::parametrize::remove_parametrizations(fc, "weight", /*leave_parametrized=*/true);
  { nu::parametrize::Cached c; }
  nu::prune::l1_unstructured(fc, "weight", /*amount=*/0.3);
  nu::prune::random_unstructured(fc, "bias", 3);
  // Not in API.md's block: conv's weight is still parametrized there, and pruning a
  // parametrized tensor fails, as in Python (it is not a Parameter).
  EXPECT_THROW(nu::prune::ln_structured(conv, "weight", 0.5, 2, 0), modhooks::TypeError);
  nu::parametrize::remove_parametrizations(conv, "weight");
  nu::prune::ln_structured(conv, "weight", 0.5, /*n=*/2, /*dim=*/0);
  nu::prune::global_unstructured({{fc1, "weight"}, {fc2, "weight"}}, nu::prune::L1Unstructured,
                                 0.2);
  nu::prune::custom_from_mask(fc, "weight", mask);
  bool q = nu::prune::is_pruned(fc);
  nu::prune::remove(fc, "weight");
  EXPECT_TRUE(p);
  EXPECT_TRUE(q);
  EXPECT_FALSE(nu::parametrize::is_parametrized(fc, "weight"));
  EXPECT_TRUE(nu::parametrize::is_parametrized(fc, "bias") == false);
  EXPECT_TRUE(nu::prune::is_pruned(fc1));
}

TEST(TestPruningNN, Differential) {
  for (const char* name :
       {"prune_l1", "prune_repeat", "prune_random_structured", "prune_custom", "prune_global"}) {
    nn_utils_scenarios::check_against_python(name);
  }
}

TEST(TestPruningNN, PruningOnATakenNameLeavesTheModuleAsItWas) {
  nn_utils_scenarios::expect_name_taken(
      [](torch::nn::Linear& m) { prune::l1_unstructured(m, "weight", 0.5); }, "weight_orig");
  nn_utils_scenarios::expect_name_taken(
      [](torch::nn::Linear& m) { prune::l1_unstructured(m, "weight", 0.5); }, "weight_mask",
      /*module=*/true);
}

}  // namespace

// Python's numbers in the patterns people train with (tests/nn_utils_patterns.h).
TEST(TestPruningNN, InTrainingPatterns) { nn_utils_patterns::replay_all({"prune"}); }
