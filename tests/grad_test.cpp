// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

// modhooks::grad hooks on CPU (and CUDA when this machine has a GPU): called directly in both
// hook forms, and through a real autograd graph via plain libtorch tensor hooks.

#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/linear.h>
#include <cmath>
#include <functional>

#include "modhooks/core/error.h"
#include "modhooks/device/backend.h"
#include "modhooks/device/grad.h"
#include "modhooks/nn/call.h"
#include "modhooks/register.h"
#include "test_util.h"

namespace {

using TensorList = std::vector<at::Tensor>;
using PreHook = std::function<std::optional<TensorList>(torch::nn::Module&, const TensorList&)>;
using FullHook = std::function<std::optional<TensorList>(torch::nn::Module&, const TensorList&,
                                                         const TensorList&)>;

/// A module type that is not a torch::nn::Module, to show hooks accept any module type.
struct PlainModel {};

at::Device cuda() { return at::Device(at::kCUDA, 0); }

class Grad : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !at::globalContext().hasCUDA()) {
      GTEST_SKIP() << "no CUDA device on this machine";
    }
  }
  at::Device device() const { return GetParam() == "cuda" ? cuda() : at::Device(at::kCPU); }
  at::Tensor on(const at::Tensor& t) const { return t.to(device()); }
};

TEST_P(Grad, ZeroReturnsNewZerosAndPassesUndefinedThrough) {
  torch::nn::Module m;
  TensorList grads{on(at::randn({2, 3})), at::Tensor(), on(at::randn({4}, at::kDouble))};
  TensorList before{grads[0].clone(), at::Tensor(), grads[2].clone()};
  auto out = modhooks::grad::zero()(m, grads);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->size(), 3u);
  EXPECT_TRUE((*out)[0].equal(on(at::zeros({2, 3}))));
  EXPECT_FALSE((*out)[1].defined());
  EXPECT_EQ((*out)[2].scalar_type(), at::kDouble);
  EXPECT_EQ((*out)[2].device(), device());
  EXPECT_TRUE((*out)[2].equal(on(at::zeros({4}, at::kDouble))));
  // Hooks return replacements; the gradients autograd handed over are untouched.
  EXPECT_TRUE(grads[0].equal(before[0]));
  EXPECT_TRUE(grads[2].equal(before[2]));
}

TEST_P(Grad, ScaleInBothHookForms) {
  torch::nn::Module m;
  at::Tensor gi = on(at::randn({3}));
  at::Tensor go = on(at::randn({3}));
  auto hook = modhooks::grad::scale(-2.5);
  EXPECT_EQ(hook.factor(), -2.5);
  auto pre = hook(m, TensorList{go});
  EXPECT_TRUE((*pre)[0].allclose(go * -2.5));
  auto full = hook(m, TensorList{gi, at::Tensor()}, TensorList{go});
  ASSERT_EQ(full->size(), 2u);
  EXPECT_TRUE((*full)[0].allclose(gi * -2.5));
  EXPECT_FALSE((*full)[1].defined());
}

TEST_P(Grad, ZeroInFullHookFormRewritesGradInputOnly) {
  PlainModel model;
  auto out =
      modhooks::grad::zero()(model, TensorList{on(at::ones({2}))}, TensorList{on(at::ones({5}))});
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].sizes(), at::IntArrayRef({2}));
  EXPECT_TRUE((*out)[0].equal(on(at::zeros({2}))));
}

TEST_P(Grad, ClipNormFollowsClipGradNorm) {
  torch::nn::Module m;
  TensorList grads{on(at::full({4}, 3.0)), at::Tensor(), on(at::full({4}, 4.0))};  // norm 10
  auto out = modhooks::grad::clip_norm(5.0)(m, grads);
  ASSERT_TRUE(out.has_value());
  const double coef = 5.0 / (10.0 + 1e-6);
  EXPECT_TRUE((*out)[0].allclose(on(at::full({4}, 3.0 * coef))));
  EXPECT_FALSE((*out)[1].defined());
  EXPECT_TRUE((*out)[2].allclose(on(at::full({4}, 4.0 * coef))));
  at::Tensor norm = at::linalg_vector_norm(at::stack({(*out)[0], (*out)[2]}), 2);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-5);
  EXPECT_NEAR(modhooks::grad::detail::total_norm(grads), 10.0, 1e-5);
}

TEST_P(Grad, ClipNormKeepsGradientsUnderTheLimit) {
  torch::nn::Module m;
  TensorList grads{on(at::full({4}, 3.0)), on(at::full({4}, 4.0))};
  EXPECT_FALSE(modhooks::grad::clip_norm(10.0)(m, grads).has_value());
  EXPECT_FALSE(modhooks::grad::clip_norm(10.5)(m, TensorList{}, grads).has_value());
  EXPECT_TRUE(modhooks::grad::clip_norm(9.5)(m, grads, TensorList{}).has_value());
}

TEST_P(Grad, CheckFiniteNamesTheModuleAndTheGradient) {
  torch::nn::Linear linear(2, 2);
  TensorList clean{on(at::ones({2})), at::Tensor()};
  TensorList bad{on(at::ones({2})), at::Tensor(), on(at::full({3}, INFINITY))};
  EXPECT_FALSE(modhooks::grad::check_finite()(*linear, clean).has_value());
  std::string msg = expect_error<modhooks::RuntimeError>(
      [&] { modhooks::grad::check_finite()(*linear, bad); }, "device.grad.non_finite");
  EXPECT_EQ(msg,
            "modhooks: grad::check_finite: grad_output[2] of module 'torch::nn::LinearImpl' "
            "holds NaN or Inf");
  TensorList nan_input{on(at::full({1}, NAN))};
  msg = expect_error<modhooks::RuntimeError>(
      [&] { modhooks::grad::check_finite()(*linear, nan_input, clean); }, "device.grad.non_finite");
  EXPECT_NE(msg.find("grad_input[0] of module 'torch::nn::LinearImpl'"), std::string::npos) << msg;
  PlainModel plain;
  msg = expect_error<modhooks::RuntimeError>([&] { modhooks::grad::check_finite()(plain, bad); },
                                             "device.grad.non_finite");
  EXPECT_NE(msg.find("module '(anonymous namespace)::PlainModel'"), std::string::npos) << msg;
}

TEST_P(Grad, HooksFitStdFunctionInBothForms) {
  torch::nn::Module m;
  std::vector<PreHook> pre{modhooks::grad::zero(), modhooks::grad::scale(2),
                           modhooks::grad::clip_norm(1), modhooks::grad::check_finite()};
  std::vector<FullHook> full{modhooks::grad::zero(), modhooks::grad::scale(2),
                             modhooks::grad::clip_norm(1), modhooks::grad::check_finite()};
  TensorList g{on(at::ones({4}))};
  EXPECT_TRUE((*pre[1](m, g))[0].equal(on(at::full({4}, 2.0f))));
  EXPECT_TRUE((*full[0](m, g, g))[0].equal(on(at::zeros({4}))));
  EXPECT_TRUE((*pre[2](m, g))[0].allclose(on(at::full({4}, 0.5f)), 1e-5));
  EXPECT_FALSE(full[3](m, g, g).has_value());
}

/// A modhooks::grad hook applied to one tensor's gradient through libtorch's own tensor hooks:
/// what the module hooks do, minus the module wiring.
template <class Hook>
void hook_tensor(at::Tensor& t, Hook hook) {
  t.register_hook([hook](const at::Tensor& g) {
    torch::nn::Module m;
    auto out = hook(m, TensorList{g});
    return out ? (*out)[0] : g;
  });
}

TEST_P(Grad, RewritesFlowThroughAutograd) {
  at::Tensor x = on(at::ones({3})).set_requires_grad(true);
  at::Tensor y = x * 4;
  hook_tensor(y, modhooks::grad::scale(0.25));
  y.sum().backward();
  EXPECT_TRUE(x.grad().equal(on(at::ones({3}))));

  at::Tensor z = on(at::ones({3})).set_requires_grad(true);
  at::Tensor h = z * 4;
  hook_tensor(h, modhooks::grad::zero());
  (h.sum() + z.sum()).backward();  // only the direct path's gradient is left
  EXPECT_TRUE(z.grad().equal(on(at::ones({3}))));

  at::Tensor c = on(at::ones({4})).set_requires_grad(true);
  at::Tensor k = c * 10;
  hook_tensor(k, modhooks::grad::clip_norm(1.0));  // incoming grad ones(4): norm 2
  k.sum().backward();
  EXPECT_TRUE(c.grad().allclose(on(at::full({4}, 10 * 0.5f)), 1e-5));
}

TEST_P(Grad, CheckFiniteStopsBackward) {
  at::Tensor x = on(at::ones({2})).set_requires_grad(true);
  at::Tensor y = x * INFINITY;
  hook_tensor(y, modhooks::grad::check_finite());
  at::Tensor loss = (y * 0).sum();
  EXPECT_NO_THROW(loss.backward());  // grad of y is 0: finite
  at::Tensor w = on(at::ones({2})).set_requires_grad(true);
  at::Tensor v = w * 1;
  hook_tensor(v, modhooks::grad::check_finite());
  at::Tensor bad = (v * INFINITY).sum();
  // libtorch rethrows the hook's error from backward() as a c10::Error carrying its text.
  try {
    bad.backward();
    ADD_FAILURE() << "backward did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("grad_output[0] of module 'torch::nn::Module' holds NaN "
                                         "or Inf"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Grad, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(Backend, CpuAndCudaUseAten) {
  EXPECT_STREQ(modhooks::device::backend_for(at::Device(at::kCPU)).name(), "aten");
  EXPECT_STREQ(modhooks::device::backend_for(cuda()).name(), "aten");
  EXPECT_FALSE(modhooks::device::is_npu(at::Device(at::kCPU)));
}

TEST(Backend, FirstNonFiniteAndNormOverSeveralTensors) {
  const auto& b = modhooks::device::backend_for(at::Device(at::kCPU));
  TensorList ts{at::ones({2}), at::full({1}, NAN), at::full({1}, -INFINITY)};
  EXPECT_EQ(b.first_non_finite(ts), std::optional<std::size_t>(1));
  EXPECT_EQ(b.first_non_finite(TensorList{at::ones({2})}), std::nullopt);
  EXPECT_NEAR(b.norm(TensorList{at::full({2}, 3.0f), at::full({2}, 4.0)}), std::sqrt(50.0), 1e-6);
}

TEST(GradHooks, ThroughCallAsBackwardPreHookAndFullHook) {
  torch::nn::Linear linear(3, 2);
  auto x = at::randn({4, 3}).requires_grad_();
  {
    modhooks::ScopedHandle h(
        modhooks::register_full_backward_pre_hook(linear, modhooks::grad::zero()));
    modhooks::call(linear, x).sum().backward();
  }
  EXPECT_TRUE(linear->weight.grad().eq(0).all().item<bool>());
  EXPECT_TRUE(x.grad().eq(0).all().item<bool>());

  x.grad().zero_();
  linear->weight.grad().zero_();
  modhooks::ScopedHandle h(
      modhooks::register_full_backward_hook(linear, modhooks::grad::scale(3.0)));
  modhooks::call(linear, x).sum().backward();
  // d(sum(x W^T + b))/dx = 1 W, tripled by the hook; the weight's gradient is untouched.
  EXPECT_TRUE(at::allclose(x.grad(), 3 * at::ones({4, 2}).mm(linear->weight.detach())));
  EXPECT_TRUE(at::allclose(linear->weight.grad(), at::ones({2, 4}).mm(x.detach())));
}

}  // namespace
