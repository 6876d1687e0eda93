// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/optim/adam.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include "modhooks/core/error.h"
#include "state_key.h"

MODHOOKS_BEGIN_NAMESPACE
namespace optim {
namespace {

/// Python's message, before any parameter changes (Python checks each group before stepping it).
void check_dense(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (param.grad().defined() && param.grad().is_sparse()) {
        detail::fail<RuntimeError>(
            "optim.adam.sparse",
            "Adam does not support sparse gradients, please consider SparseAdam instead");
      }
    }
  }
}

/// Python's `_single_tensor_adam` over every group: `decoupled` is its `decoupled_weight_decay`
/// (AdamW). Each line is Python's, with its numbers in double as Python's floats are: `lerp_`
/// for the first moment, `pow(x, 0.5)` for `** 0.5`, the step as a whole number.
template <class Options, class State>
at::Tensor python_step(torch::optim::Optimizer& optimizer,
                       const torch::optim::Optimizer::LossClosure& closure, bool decoupled) {
  at::Tensor loss;
  if (closure) {
    const at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  check_dense(optimizer);
  const at::NoGradGuard no_grad;
  auto& states = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    const double lr = options.lr();
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const double weight_decay = options.weight_decay();
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      at::Tensor grad = param.grad();
      const auto key = detail::state_key(states, param);
      auto found = states.find(key);
      if (found == states.end()) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(param, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
        if (options.amsgrad()) {
          fresh->max_exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
        }
        found = states.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<State&>(*found->second);
      state.step(state.step() + 1);
      if (weight_decay != 0) {
        if (decoupled) {
          param.mul_(1 - lr * weight_decay);
        } else {
          grad = grad.add(param, weight_decay);
        }
      }
      state.exp_avg().lerp_(grad, 1 - beta1);
      state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const auto step = static_cast<double>(state.step());
      const double bias_correction1 = 1 - std::pow(beta1, step);
      const double bias_correction2 = 1 - std::pow(beta2, step);
      const double step_size = lr / bias_correction1;
      const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
      at::Tensor denom;
      if (options.amsgrad()) {
        at::Tensor max_exp_avg_sq = state.max_exp_avg_sq();
        at::maximum_out(max_exp_avg_sq, max_exp_avg_sq, state.exp_avg_sq());
        denom = (max_exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options.eps());
      } else {
        denom = (state.exp_avg_sq().sqrt() / bias_correction2_sqrt).add_(options.eps());
      }
      param.addcdiv_(state.exp_avg(), denom, -step_size);
    }
  }
  return loss;
}

}  // namespace

at::Tensor Adam::step(LossClosure closure) {
  return python_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(*this, closure,
                                                                              false);
}

at::Tensor AdamW::step(LossClosure closure) {
  return python_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(*this, closure,
                                                                                true);
}

}  // namespace optim
MODHOOKS_END_NAMESPACE
