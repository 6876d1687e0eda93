// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/parametrize.h: PyTorch's test/nn/test_parametrization.py ported
// (TestNNParametrization, the methods named after theirs), and the differential scenario.
#include "modhooks/nn/utils/parametrize.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <optional>
#include <stdexcept>

#include "modhooks/nn/holder.h"
#include "modhooks/nn/utils/member.h"
#include "nn_utils_patterns.h"
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

/// Python's `with self.assertRaisesRegex(ValueError, text)`: `statement` throws ValueError
/// whose text starts with `text`.
#define EXPECT_VALUE_ERROR(statement, text)                          \
  try {                                                              \
    statement;                                                       \
    ADD_FAILURE() << "no ValueError";                                \
  } catch (const modhooks::ValueError& e) {                          \
    EXPECT_EQ(std::string(e.what()).rfind(text, 0), 0u) << e.what(); \
  }

/// One step of SGD on `(model.weight.T @ model.bias).sum()` after a forward (Python reads the
/// attributes, which compute); returns whether both changed.
bool step_changes_both(Linear& model, torch::optim::SGD& sgd) {
  modhooks::call(model, at::zeros({1, 8}));
  const at::Tensor weight_copy = model->weight.detach().clone();
  const at::Tensor bias_copy = model->bias.detach().clone();
  sgd.zero_grad();
  model->weight.t().matmul(model->bias).sum().backward();
  sgd.step();
  modhooks::call(model, at::zeros({1, 8}));
  return !at::equal(model->weight, weight_copy) && !at::equal(model->bias, bias_copy);
}

TEST(TestNNParametrization, test_register_and_remove_parametrization) {
  Linear model(8, 8);
  // Python's id(model.weight), id(model.bias).
  const c10::TensorImpl* initial_weight_id = model->weight.unsafeGetTensorImpl();
  const c10::TensorImpl* initial_bias_id = model->bias.unsafeGetTensorImpl();
  const at::Tensor initial_weight = model->weight.detach().clone();
  const at::Tensor initial_bias = model->bias.detach().clone();
  auto has_parametrizations = [&] { return model->named_children().contains("parametrizations"); };

  // Test unsafe flag
  EXPECT_VALUE_ERROR(parametrize::register_parametrization(model, "weight", Resize()),
                     "Registering a parametrization may not change the shape of the tensor");
  EXPECT_FALSE(parametrize::is_parametrized(model));

  // One parametrization with unsafe=True
  parametrize::register_parametrization(model, "weight", Resize(), /*unsafe=*/true);
  EXPECT_TRUE(has_parametrizations());
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
  EXPECT_FALSE(parametrize::is_parametrized(model, "bias"));
  EXPECT_FALSE(model->named_parameters(false).contains("weight"));
  EXPECT_EQ(model->weight.size(0), 1);
  parametrize::remove_parametrizations(model, "weight", /*leave_parametrized=*/false);
  EXPECT_FALSE(has_parametrizations());
  EXPECT_TRUE(at::equal(model->weight, initial_weight));
  EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);

  // Two parametrizations with unsafe=True
  parametrize::register_parametrization(model, "weight", Resize(), /*unsafe=*/true);
  parametrize::register_parametrization(model, "weight", NoResize(), /*unsafe=*/false);
  EXPECT_TRUE(has_parametrizations());
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
  EXPECT_FALSE(parametrize::is_parametrized(model, "bias"));
  EXPECT_FALSE(model->named_parameters(false).contains("weight"));
  EXPECT_EQ(model->weight.size(0), 1);
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_FALSE(has_parametrizations());
  EXPECT_TRUE(at::equal(model->weight, initial_weight));
  EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);

  // Test unsafe flag doesn't change expected behavior, then one parametrization
  for (const bool unsafe : {true, false}) {
    parametrize::register_parametrization(model, "weight", Skew(), unsafe);
    EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
    EXPECT_FALSE(model->named_parameters(false).contains("weight"));
    const at::Tensor a = weight_of(model);  // Result should be skew-symmetric
    EXPECT_TRUE(at::equal(a, -a.t()));
    parametrize::remove_parametrizations(model, "weight", false);
    EXPECT_FALSE(has_parametrizations());
    EXPECT_TRUE(at::equal(model->weight, initial_weight));
    EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);
  }

  // Test two parametrizations at the same time and removing them
  parametrize::register_parametrization(model, "weight", Skew());
  parametrize::register_parametrization(model, "weight", Orthogonal());
  const at::Tensor x = weight_of(model);  // Result should be orthogonal
  EXPECT_TRUE(at::allclose(x.t().matmul(x), at::eye(8), 1e-5, 1e-5));
  EXPECT_TRUE(has_parametrizations());
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
  EXPECT_FALSE(parametrize::is_parametrized(model, "bias"));
  EXPECT_FALSE(model->named_parameters(false).contains("weight"));
  EXPECT_TRUE(
      parametrize::parametrizations(model, "weight")->named_parameters(false).contains("original"));
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(at::equal(model->weight, initial_weight));
  EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);
  EXPECT_FALSE(has_parametrizations());

  // Add everything
  parametrize::register_parametrization(model, "weight", Skew());
  parametrize::register_parametrization(model, "weight", Orthogonal());
  parametrize::register_parametrization(model, "bias", FirstZero());
  parametrize::register_parametrization(model, "bias", LastZero());
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_TRUE(parametrize::is_parametrized(model, "weight"));
  EXPECT_TRUE(parametrize::is_parametrized(model, "bias"));
  EXPECT_EQ(model->bias[0].item<float>(), 0.0f);
  EXPECT_EQ(model->bias[-1].item<float>(), 0.0f);
  EXPECT_EQ(model->parameters().size(), 2u);  // Nothing weird has happened
  // The optimizer holds the originals, which stay the module's tensors.
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  EXPECT_TRUE(step_changes_both(model, sgd));

  // Remove first parametrization: the model is still parametrized, and so is the bias
  parametrize::remove_parametrizations(model, "weight", false);
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_FALSE(parametrize::is_parametrized(model, "weight"));
  EXPECT_TRUE(parametrize::is_parametrized(model, "bias"));
  modhooks::call(model, at::zeros({1, 8}));
  EXPECT_EQ(model->bias[0].item<float>(), 0.0f);  // Still parametrized
  EXPECT_EQ(model->bias[-1].item<float>(), 0.0f);
  EXPECT_FALSE(at::equal(model->weight, initial_weight));             // Has been updated
  EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);  // Keeps the same id
  EXPECT_EQ(model->parameters().size(), 2u);
  EXPECT_TRUE(step_changes_both(model, sgd));

  // Remove the second parametrization: the module is not parametrized
  parametrize::remove_parametrizations(model, "bias", false);
  EXPECT_FALSE(parametrize::is_parametrized(model));
  EXPECT_FALSE(at::equal(model->bias, initial_bias));  // Has been updated
  EXPECT_NE(model->bias[0].item<float>(), 0.0f);       // Not parametrized
  EXPECT_NE(model->bias[-1].item<float>(), 0.0f);
  EXPECT_EQ(model->bias.unsafeGetTensorImpl(), initial_bias_id);  // Keeps the same id
  EXPECT_FALSE(has_parametrizations());
  EXPECT_EQ(model->parameters().size(), 2u);
  EXPECT_TRUE(step_changes_both(model, sgd));

  // Test leave_parametrized=True
  for (int i = 0; i < 2; ++i) {
    parametrize::register_parametrization(model, "weight", Skew());
    parametrize::register_parametrization(model, "weight", Orthogonal());
    parametrize::remove_parametrizations(model, "weight", /*leave_parametrized=*/true);
    // We didn't change the dtype nor had multiple inputs, so the id should be the same
    EXPECT_EQ(model->weight.unsafeGetTensorImpl(), initial_weight_id);
    EXPECT_EQ(model->bias.unsafeGetTensorImpl(), initial_bias_id);
    EXPECT_TRUE(model->weight.is_leaf());
    EXPECT_TRUE(at::allclose(model->weight.t().matmul(model->weight), at::eye(8), 1e-5, 1e-5));
    EXPECT_TRUE(step_changes_both(model, sgd));  // Things are updated
  }
  EXPECT_EQ(modhooks::state_dict(model).keys(), (std::vector<std::string>{"bias", "weight"}));
}

/// Python's `nn.Linear(8, 8)` after `delattr(model, "bias"); model.bias = Buffer(torch.ones(8))`:
/// libtorch cannot take a parameter out of a Linear, so a module of the same shape, whose bias is
/// a buffer that its forward reads from a member it declares.
struct BufferBiasImpl : torch::nn::Module {
  at::Tensor weight = register_parameter("weight", at::randn({8, 8}));
  at::Tensor bias = register_buffer("bias", at::ones({8}));
  at::Tensor forward(const at::Tensor& x) { return at::linear(x, weight, bias); }
};
MODHOOKS_MODULE(BufferBias);

TEST(TestNNParametrization, test_register_and_remove_buffer_parametrization) {
  BufferBias model;
  const c10::TensorImpl* initial_bias_id = model->bias.unsafeGetTensorImpl();
  modhooks::nn::utils::declare_member(model, "bias", model->bias);
  // Instantiate parametrizations on buffers. It should work as expected
  parametrize::register_parametrization(model, "bias", FirstZero());
  parametrize::register_parametrization(model, "bias", LastZero());
  EXPECT_TRUE(parametrize::is_parametrized(model));
  EXPECT_TRUE(parametrize::is_parametrized(model, "bias"));
  EXPECT_FALSE(model->named_buffers(false).contains("bias"));
  auto list = parametrize::parametrizations(model, "bias");
  EXPECT_TRUE(list->named_buffers(false).contains("original"));
  EXPECT_FALSE(list->named_parameters(false).contains("original"));
  model(at::zeros({1, 8}));  // through the holder: the bias is computed first
  EXPECT_EQ(model->bias[0].item<float>(), 0.0f);
  EXPECT_EQ(model->bias[-1].item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(model->bias.slice(0, 1, -1), at::ones({6})));
  EXPECT_EQ(model->parameters().size(), 1u);

  // Remove parametrizations on buffers. It should work as expected
  parametrize::remove_parametrizations(model, "bias", /*leave_parametrized=*/true);
  EXPECT_FALSE(parametrize::is_parametrized(model));
  EXPECT_FALSE(parametrize::is_parametrized(model, "bias"));
  EXPECT_EQ(model->bias[0].item<float>(), 0.0f);
  EXPECT_EQ(model->bias[-1].item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(model->bias.slice(0, 1, -1), at::ones({6})));
  EXPECT_EQ(model->parameters().size(), 1u);
  EXPECT_TRUE(model->named_buffers(false).contains("bias"));
  EXPECT_EQ(model->bias.unsafeGetTensorImpl(), initial_bias_id);  // the buffer itself again
}

TEST(TestNNParametrization, test_caching_parametrization) {
  Linear model(5, 5);
  parametrize::register_parametrization(model, "weight", Skew());
  parametrize::register_parametrization(model, "weight", Orthogonal());
  // Test that the caching system works: Python reads `model.weight` twice and gets one object;
  // here two forwards read the member.
  {
    parametrize::Cached cached;
    modhooks::call(model, at::ones({1, 5}));
    const at::Tensor x = model->weight;
    modhooks::call(model, at::ones({1, 5}));
    const at::Tensor y = model->weight;
    EXPECT_EQ(x.unsafeGetTensorImpl(), y.unsafeGetTensorImpl());
  }
  // Outside the scope each forward computes a tensor of its own.
  modhooks::call(model, at::ones({1, 5}));
  const at::Tensor x = model->weight;
  modhooks::call(model, at::ones({1, 5}));
  EXPECT_NE(x.unsafeGetTensorImpl(), model->weight.unsafeGetTensorImpl());
}

TEST(TestNNParametrization, CachedComputesOncePerScope) {
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

/// A right inverse that changes the values and a forward that changes the shape, which the
/// registration then refuses.
struct ShrinkImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x.slice(0, 0, 1); }
  at::Tensor right_inverse(const at::Tensor& x) { return x * 3; }
};
TORCH_MODULE(Shrink);

/// A parametrization that raises while `fail` is set.
struct FailingImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    if (fail) throw std::runtime_error("the parametrization's own error");
    return x * 2;
  }
  bool fail = false;
};
TORCH_MODULE(Failing);

TEST(TestNNParametrization, AParametrizationThatRaisesEndsTheForwardAndTheNextOneComputes) {
  // As in Python, a forward that computes raises what the parametrization raised; served or
  // not, the next forward computes from the originals as they are then.
  Linear model(3, 3);
  Failing failing;
  parametrize::register_parametrization(model, "weight", failing);
  model->eval();
  const at::Tensor x = at::ones({1, 3});
  const at::Tensor original =
      nn_utils_scenarios::parameter_of(*model, "parametrizations.weight.original");
  for (const bool grad : {true, false}) {
    SCOPED_TRACE(grad ? "with grad" : "without grad");
    at::AutoGradMode mode(grad);
    {
      at::NoGradGuard no_grad;
      original.mul_(3);  // changed: the next forward computes, served or not
    }
    failing->fail = true;
    EXPECT_THROW(modhooks::call(model, x), std::runtime_error);
    failing->fail = false;
    EXPECT_TRUE(
        at::equal(modhooks::call(model, x), at::linear(x, original * 2, model->bias).detach()));
  }
}

TEST(TestNNParametrization, RefusedRegistrationLeavesTheOriginal) {
  Linear model(4, 4);
  const at::Tensor weight = model->weight;
  const at::Tensor before = weight.detach().clone();
  EXPECT_VALUE_ERROR(parametrize::register_parametrization(model, "weight", Shrink()),
                     "Registering a parametrization may not change the shape of the tensor");
  EXPECT_TRUE(at::equal(model->weight, before));
  EXPECT_TRUE(model->weight.is_same(weight));
  EXPECT_TRUE(model->named_parameters(false)["weight"].is_same(weight));
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
  EXPECT_EQ(expect_error<modhooks::ValueError>(
                [&] { parametrize::register_parametrization(module, "foo", Skew()); },
                "nn.utils.parametrize.no_tensor"),
            "Module 'torch::nn::Linear(in_features=3, out_features=4, bias=true)' does not "
            "have a parameter, a buffer, or a parametrized element with name 'foo'");
  EXPECT_EQ(expect_error<modhooks::ValueError>(
                [&] { parametrize::register_parametrization(module, "weight", ToDouble()); },
                "nn.utils.parametrize.dtype"),
            "Registering a parametrization may not change the dtype of the tensor, unless "
            "`unsafe` flag is enabled.\nunparametrized dtype: torch.float32\nparametrized "
            "dtype: torch.float64");
  EXPECT_ERROR(parametrize::remove_parametrizations(module, "bias"), ValueError,
               "nn.utils.parametrize.not_parametrized");
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
  EXPECT_EQ(expect_error<modhooks::RuntimeError>(
                [&] {
                  parametrize::parametrizations(square, "weight")->right_inverse(at::zeros({4, 4}));
                },
                "nn.utils.parametrize.no_right_inverse"),
            "parametrization Skew does not implement right_inverse.");
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

TEST(TestNNParametrization, ParametrizingWithATakenNameLeavesTheModuleAsItWas) {
  for (bool module : {false, true}) {
    nn_utils_scenarios::expect_name_taken(
        [](torch::nn::Linear& m) {
          parametrize::register_parametrization(m, "weight", nn_utils_scenarios::Symmetric());
        },
        "parametrizations", module);
  }
}

TEST(TestNNParametrization, TheOriginalsDieWithTheModule) {
  // Python's parametrized tensor lives in the module's `parametrizations`: when the module goes,
  // so do its originals, whatever modhooks keeps beside it.
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> original;
  {
    Linear m(4, 4);
    parametrize::register_parametrization(m, "weight", nn_utils_scenarios::Symmetric());
    modhooks::call(m, at::randn({2, 4}));
    original.emplace(parametrize::parametrizations(m, "weight")
                         ->named_parameters()["original"]
                         .getIntrusivePtr());
    EXPECT_FALSE(original->expired());
  }
  EXPECT_TRUE(original->expired());
}

}  // namespace

// Python's numbers in the patterns people train with (tests/nn_utils_patterns.h).
TEST(TestNNParametrization, InTrainingPatterns) { nn_utils_patterns::replay_all({"psym"}); }
