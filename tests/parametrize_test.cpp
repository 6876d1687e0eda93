// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/parametrize.h: PyTorch's test/nn/test_parametrization.py ported
// (TestNNParametrization, the methods named after theirs), and the differential scenario.
#include "modhooks/nn/utils/parametrize.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "nn_utils_scenarios.h"

namespace {

namespace parametrize = modhooks::nn::utils::parametrize;
using torch::nn::Linear;

struct SkewImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor lower = x.tril(-1);
    return lower - lower.t();
  }
};
TORCH_MODULE(Skew);

struct OrthogonalImpl : torch::nn::Module {  // the Cayley map
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor id = at::eye(x.size(0), x.options());
    return at::linalg_solve(id + x, id - x);
  }
};
TORCH_MODULE(Orthogonal);

struct ResizeImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x.slice(0, 0, 1); }
};
TORCH_MODULE(Resize);

struct NoResizeImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x; }
};
TORCH_MODULE(NoResize);

struct FirstZeroImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return at::cat({x.new_zeros({1}), x.slice(0, 1)}); }
};
TORCH_MODULE(FirstZero);

struct LastZeroImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return at::cat({x.slice(0, 0, -1), x.new_zeros({1})}); }
};
TORCH_MODULE(LastZero);

/// Counts its forwards (test_caching_parametrization).
struct CountingImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    ++calls;
    return x * 2;
  }
  at::Tensor right_inverse(const at::Tensor& x) { return x / 2; }
  int calls = 0;
};
TORCH_MODULE(Counting);

/// Two originals from one tensor (test_multiple_inputs_parametrization's RankOne, simplified).
struct SumOfTwoImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return a + b; }
  std::pair<at::Tensor, at::Tensor> right_inverse(const at::Tensor& x) {
    return {x.triu(), x.tril(-1)};
  }
};
TORCH_MODULE(SumOfTwo);

struct ToDoubleImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x.to(at::kDouble); }
};
TORCH_MODULE(ToDouble);

/// What `module.weight` is in Python, at the next forward.
at::Tensor weight_of(Linear& model) {
  modhooks::call(model, at::zeros({1, model->options.in_features()}));
  return model->weight;
}

TEST(TestNNParametrization, test_register_and_remove_parametrization) {
  Linear model(8, 8);
  const c10::TensorImpl* weight_impl = model->weight.unsafeGetTensorImpl();
  const at::Tensor initial_weight = model->weight.detach().clone();
  const at::Tensor initial_bias = model->bias.detach().clone();

  try {
    parametrize::register_parametrization(model, "weight", Resize());
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "Registering a parametrization may not change the shape of the tensor", 0),
              0u);
  }
  EXPECT_FALSE(parametrize::is_parametrized(model));

  parametrize::register_parametrization(model, "weight", Resize(), /*unsafe=*/true);
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
  EXPECT_FALSE(parametrize::is_parametrized(model, "bias"));
  EXPECT_FALSE(model->named_parameters(false).contains("weight"));
  EXPECT_EQ(model->weight.size(0), 1);
  parametrize::remove_parametrizations(model, "weight", /*leave_parametrized=*/false);
  EXPECT_FALSE(parametrize::is_parametrized(model));
  EXPECT_FALSE(model->named_children().contains("parametrizations"));
  EXPECT_TRUE(at::equal(model->weight, initial_weight));
  EXPECT_EQ(model->weight.unsafeGetTensorImpl(), weight_impl);

  parametrize::register_parametrization(model, "weight", Resize(), true);
  parametrize::register_parametrization(model, "weight", NoResize(), false);
  EXPECT_EQ(parametrize::parametrizations(model, "weight")->size(), 2u);
  EXPECT_EQ(model->weight.size(0), 1);
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(at::equal(model->weight, initial_weight));

  parametrize::register_parametrization(model, "weight", Skew(), true);
  EXPECT_TRUE(at::equal(weight_of(model), -weight_of(model).t()));
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(at::equal(model->weight, initial_weight));

  parametrize::register_parametrization(model, "weight", Skew());
  parametrize::register_parametrization(model, "weight", Orthogonal());
  const at::Tensor x = weight_of(model);
  EXPECT_TRUE(at::allclose(x.t().matmul(x), at::eye(8), 1e-5, 1e-5));
  auto list = parametrize::parametrizations(model, "weight");
  ASSERT_TRUE(list);
  EXPECT_TRUE(list->named_parameters(false).contains("original"));
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(at::equal(model->weight, initial_weight));

  parametrize::register_parametrization(model, "weight", Skew());
  parametrize::register_parametrization(model, "weight", Orthogonal());
  parametrize::register_parametrization(model, "bias", FirstZero());
  parametrize::register_parametrization(model, "bias", LastZero());
  modhooks::call(model, at::zeros({1, 8}));
  EXPECT_EQ(model->bias[0].item<float>(), 0.0f);
  EXPECT_EQ(model->bias[-1].item<float>(), 0.0f);
  EXPECT_EQ(model->parameters().size(), 2u);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor weight_copy = model->weight.detach().clone();
  const at::Tensor bias_copy = model->bias.detach().clone();
  sgd.zero_grad();
  modhooks::call(model, at::zeros({1, 8}));
  model->weight.t().matmul(model->bias).sum().backward();
  sgd.step();
  EXPECT_FALSE(at::equal(weight_of(model), weight_copy));
  EXPECT_FALSE(at::equal(model->bias, bias_copy));
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_TRUE(parametrize::is_parametrized(model, "bias"));
  parametrize::remove_parametrizations(model, "bias", false);
  EXPECT_FALSE(parametrize::is_parametrized(model));

  for (int i = 0; i < 2; ++i) {
    parametrize::register_parametrization(model, "weight", Skew());
    parametrize::register_parametrization(model, "weight", Orthogonal());
    parametrize::remove_parametrizations(model, "weight", /*leave_parametrized=*/true);
    // One tensor of the same dtype: the module's member is the same tensor as before.
    EXPECT_EQ(model->weight.unsafeGetTensorImpl(), weight_impl);
    EXPECT_TRUE(model->weight.is_leaf());
    EXPECT_TRUE(at::allclose(model->weight.t().matmul(model->weight), at::eye(8), 1e-5, 1e-5));
  }
  EXPECT_EQ(modhooks::state_dict(model).keys(), (std::vector<std::string>{"bias", "weight"}));
  (void)initial_bias;
}

TEST(TestNNParametrization, test_register_and_remove_buffer_parametrization) {
  Linear model(4, 4);
  model->register_buffer("weight_buffer", at::randn({4, 4}));
  parametrize::register_parametrization(model, "weight_buffer", Skew());
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight_buffer"));
  EXPECT_FALSE(model->named_buffers(false).contains("weight_buffer"));
  auto list = parametrize::parametrizations(model, "weight_buffer");
  EXPECT_TRUE(list->named_buffers(false).contains("original"));
  EXPECT_FALSE(list->named_parameters(false).contains("original"));
  const at::Tensor a = modhooks::nn::utils::detail::get_tensor(*model, "weight_buffer");
  EXPECT_TRUE(at::equal(a, -a.t()));
  parametrize::remove_parametrizations(model, "weight_buffer");
  EXPECT_TRUE(model->named_buffers(false).contains("weight_buffer"));
  EXPECT_FALSE(model->named_parameters(false).contains("weight_buffer"));
}

TEST(TestNNParametrization, test_caching_parametrization) {
  Linear model(3, 3);
  Counting counting;
  parametrize::register_parametrization(model, "weight", counting);
  const int at_registration = counting->calls;
  {
    parametrize::Cached cached;
    modhooks::call(model, at::ones({1, 3}));
    modhooks::call(model, at::ones({1, 3}));
    EXPECT_EQ(counting->calls, at_registration + 1);
  }
  modhooks::call(model, at::ones({1, 3}));
  EXPECT_EQ(counting->calls, at_registration + 2);
}

TEST(TestNNParametrization, test_parametrization_same_training_mode) {
  Linear model(4, 4);
  model->eval();
  Skew skew;
  parametrize::register_parametrization(model, "weight", skew);
  EXPECT_FALSE(skew->is_training());
  model->train();
  EXPECT_TRUE(skew->is_training());
}

TEST(TestNNParametrization, test_errors_unparametrized_tensor_parametrization) {
  Linear module(3, 4);
  try {
    parametrize::register_parametrization(module, "foo", Skew());
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Module 'torch::nn::Linear(in_features=3, out_features=4, bias=true)' does not "
              "have a parameter, a buffer, or a parametrized element with name 'foo'");
  }
  try {
    parametrize::register_parametrization(module, "weight", ToDouble());
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Registering a parametrization may not change the dtype of the tensor, unless "
              "`unsafe` flag is enabled.\nunparametrized dtype: torch.float32\nparametrized "
              "dtype: torch.float64");
  }
  try {
    parametrize::remove_parametrizations(module, "bias");
    FAIL();
  } catch (const modhooks::ValueError& e) {
    EXPECT_STREQ(e.id(), "nn.utils.parametrize.not_parametrized");
  }
  // None of it changed the module.
  EXPECT_EQ(module->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(module->named_children().is_empty());
}

TEST(TestNNParametrization, test_errors_parametrized_tensor_parametrization) {
  Linear module(3, 4);
  parametrize::register_parametrization(module, "weight", NoResize());
  EXPECT_THROW(parametrize::register_parametrization(module, "weight", Resize()),
               modhooks::ValueError);
  EXPECT_EQ(parametrize::parametrizations(module, "weight")->size(), 1u);
  // Stacked, the checks run before anything changes.
  EXPECT_THROW(parametrize::register_parametrization(module, "weight", ToDouble()),
               modhooks::ValueError);
  EXPECT_EQ(parametrize::parametrizations(module, "weight")->size(), 1u);
  // Unsafe, a parametrization that cannot run on the tensor fails at registration here (the
  // member forward reads must hold its value; Python computes it at the first access).
  EXPECT_THROW(parametrize::register_parametrization(module, "weight", Skew(), /*unsafe=*/true),
               c10::Error);
  EXPECT_EQ(parametrize::parametrizations(module, "weight")->size(), 1u);
  // No right inverse: assigning a value fails with Python's text.
  Linear square(4, 4);
  parametrize::register_parametrization(square, "weight", Skew(), /*unsafe=*/true);
  try {
    parametrize::parametrizations(square, "weight")->right_inverse(at::zeros({4, 4}));
    FAIL();
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.what(), "parametrization Skew does not implement right_inverse.");
  }
}

TEST(TestNNParametrization, test_multiple_inputs_parametrization) {
  Linear model(4, 4);
  const at::Tensor initial = model->weight.detach().clone();
  parametrize::register_parametrization(model, "weight", SumOfTwo());
  auto list = parametrize::parametrizations(model, "weight");
  EXPECT_FALSE(list->is_tensor());
  EXPECT_EQ(list->ntensors(), 2u);
  EXPECT_EQ(modhooks::state_dict(model).keys(),
            (std::vector<std::string>{"bias", "parametrizations.weight.original0",
                                      "parametrizations.weight.original1"}));
  EXPECT_TRUE(at::allclose(weight_of(model), initial));
  modhooks::call(model, at::ones({2, 4})).sum().backward();
  EXPECT_TRUE(nn_utils_scenarios::parameter_of(*model, "parametrizations.weight.original0")
                  .grad()
                  .defined());
  EXPECT_THROW(parametrize::remove_parametrizations(model, "weight", false), modhooks::ValueError);
  parametrize::remove_parametrizations(model, "weight");
  EXPECT_TRUE(at::allclose(model->weight, initial));
}

TEST(TestNNParametrization, test_initialization_parametrization) {
  // right_inverse runs at registration and when a value is assigned.
  Linear model(3, 3);
  Counting counting;
  const at::Tensor initial = model->weight.detach().clone();
  parametrize::register_parametrization(model, "weight", counting);
  EXPECT_TRUE(at::allclose(
      nn_utils_scenarios::parameter_of(*model, "parametrizations.weight.original"), initial / 2));
  EXPECT_TRUE(at::allclose(weight_of(model), initial));
  parametrize::parametrizations(model, "weight")->right_inverse(at::ones({3, 3}));
  EXPECT_TRUE(at::allclose(weight_of(model), at::ones({3, 3})));
}

TEST(TestNNParametrization, ParametrizationHooksFire) {
  // The parametrization runs through modhooks::call, so its own hooks fire, as in Python.
  Linear model(3, 3);
  NoResize p;
  int fired = 0;
  auto h = modhooks::register_forward_hook(
      p, [&](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) { ++fired; });
  parametrize::register_parametrization(model, "weight", p);
  const int after_registration = fired;
  modhooks::call(model, at::ones({1, 3}));
  EXPECT_EQ(fired, after_registration + 1);
}

TEST(TestNNParametrization, Differential) {
  nn_utils_scenarios::check_against_python("psym_linear");
}

}  // namespace
