// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/backward_hook.h"

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "modhooks/core/error.h"

namespace modhooks {
namespace detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The identity Function of both sides (Python's `BackwardHookFunction`). Its outputs are views
/// of its inputs; inputs that do not require grad come out non-differentiable. Backward hands
/// the incoming gradients to the call's BackwardHook, which runs the user hooks.
struct BackwardHookFunction : torch::autograd::Function<BackwardHookFunction> {
  // at::TensorList, not std::vector: only the former counts as differentiable inputs.
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors, c10::IValue hook,
                               bool output_side) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["hook"] = std::move(hook);
    ctx->saved_data["output_side"] = output_side;
    variable_list outputs(tensors.begin(), tensors.end());
    variable_list constant;
    for (const auto& t : outputs) {
      if (!t.requires_grad()) constant.push_back(t);
    }
    if (!constant.empty()) ctx->mark_non_differentiable(constant);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* hook = static_cast<BackwardHookBase*>(ctx->saved_data["hook"].toCapsule().get());
    variable_list result = ctx->saved_data["output_side"].toBool() ? hook->output_grads_ready(grads)
                                                                   : hook->input_grads_ready(grads);
    result.resize(result.size() + 2);  // none for `hook` and `output_side`
    return result;
  }
};

bool any_requires_grad(const TensorList& tensors) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [](const at::Tensor& t) { return t.requires_grad(); });
}

/// Places `grads` (one per wrapped tensor) at their argument positions among `n`.
TensorList scatter(const TensorList& grads, const std::vector<std::size_t>& positions,
                   std::size_t n) {
  TensorList all(n);
  for (std::size_t i = 0; i < positions.size(); ++i) all[positions[i]] = grads[i];
  return all;
}

TensorList gather(const TensorList& all, const std::vector<std::size_t>& positions) {
  TensorList grads;
  grads.reserve(positions.size());
  for (std::size_t p : positions) grads.push_back(all[p]);
  return grads;
}

}  // namespace

void fail_backward_hook_length(std::size_t got, std::size_t expected) {
  fail(
      fmt::format("Backward hook returned an invalid number of grad_input, got {}, but expected {}",
                  got, expected));
}

void fail_backward_pre_hook_length(std::size_t got, std::size_t expected) {
  fail(fmt::format(
      "Backward pre hook returned an invalid number of grad_output, got {}, but expected {}", got,
      expected));
}

TensorList BackwardHookBase::wrap(const TensorList& tensors, bool output_side) {
  auto self = c10::intrusive_ptr<BackwardHookBase>::reclaim_copy(this);
  return BackwardHookFunction::apply(at::TensorList(tensors),
                                     c10::IValue::make_capsule(std::move(self)), output_side);
}

TensorList BackwardHookBase::setup_input(const TensorList& tensors,
                                         std::vector<std::size_t> positions, std::size_t n) {
  n_inputs_ = n;
  if (!at::GradMode::is_enabled() || !any_requires_grad(tensors)) return tensors;
  input_positions_ = std::move(positions);
  inputs_wrapped_ = true;
  return wrap(tensors, /*output_side=*/false);
}

TensorList BackwardHookBase::setup_output(const TensorList& tensors,
                                          std::vector<std::size_t> positions, std::size_t n) {
  // Python installs nothing here, and no backward hook of this call ever fires.
  if (!at::GradMode::is_enabled() || !any_requires_grad(tensors)) return tensors;
  n_outputs_ = n;
  output_positions_ = std::move(positions);
  return wrap(tensors, /*output_side=*/true);
}

TensorList BackwardHookBase::output_grads_ready(const TensorList& grads) {
  TensorList grad_output = scatter(grads, output_positions_, n_outputs_);
  run_pre_hooks(grad_output);
  if (inputs_wrapped_) {
    grad_outputs_ = grad_output;  // the input side consumes it
  } else if (has_full_hooks()) {
    // No input requires grad: the input side never runs, so full hooks fire now with an
    // all-None grad_input and may not return gradients.
    TORCH_WARN(
        "Full backward hook is firing when gradients are computed with respect to module "
        "outputs since no inputs require gradients. See "
        "https://docs.pytorch.org/docs/main/generated/"
        "torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more details.");
    TensorList grad_input(n_inputs_);
    run_full_hooks(grad_input, grad_output, /*check_length=*/false);
    if (std::any_of(grad_input.begin(), grad_input.end(),
                    [](const at::Tensor& t) { return t.defined(); })) {
      fail(
          "Backward hook for Modules where no input requires gradient should always return None "
          "or None for all gradients.");
    }
  }
  return gather(grad_output, output_positions_);
}

TensorList BackwardHookBase::input_grads_ready(const TensorList& grads) {
  // Reached without passing the outputs (double backward, autograd.grad on an intermediate):
  // Python leaves the gradients alone and calls no hook.
  if (!grad_outputs_) return grads;
  TensorList grad_input = scatter(grads, input_positions_, n_inputs_);
  const TensorList grad_output = std::move(*grad_outputs_);
  grad_outputs_.reset();
  if (!run_full_hooks(grad_input, grad_output, /*check_length=*/true)) return grads;
  TensorList result = gather(grad_input, input_positions_);
  for (std::size_t i = 0; i < result.size(); ++i) {
    if (!grads[i].defined() && result[i].defined()) {
      fail("can't replace a None gradient with a non-None value");
    }
  }
  return result;
}

}  // namespace detail
}  // namespace modhooks
