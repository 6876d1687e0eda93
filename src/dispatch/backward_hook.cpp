// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/dispatch/detail/backward_hook.h"

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

using torch::autograd::variable_list;

/// Python's `BackwardHookFunctionBackward`: the autograd node of one side of a hooked call,
/// written as a plain Node rather than a torch::autograd::Function, which would cost a context,
/// a string-keyed map and a capsule per call. Backward hands the incoming gradients to the
/// call's BackwardHook, which runs the user hooks.
class HookNode final : public torch::autograd::Node {
 public:
  HookNode(c10::intrusive_ptr<BackwardHookBase> hook, bool output_side)
      : hook_(std::move(hook)), output_side_(output_side) {}

  std::string name() const override { return "BackwardHookFunctionBackward"; }

  variable_list apply(variable_list&& grads) override {
    return output_side_ ? hook_->output_grads_ready(grads) : hook_->input_grads_ready(grads);
  }

 private:
  c10::intrusive_ptr<BackwardHookBase> hook_;
  const bool output_side_;
};

/// libtorch 2.15 owns nodes with intrusive_ptr; earlier versions with shared_ptr and a deleter
/// that frees long chains without deep recursion.
using NodePtr = decltype(torch::autograd::Edge::function);

template <class N, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::shared_ptr<N>(new N(std::forward<Args>(args)...),
                              [](N* node) { deleteNode(node); });  // found by ADL
  } else {
    return c10::make_intrusive<N>(std::forward<Args>(args)...);
  }
}

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
  fail<RuntimeError>(
      "dispatch.backward_hook.bad_grad_input_count",
      fmt::format("Backward hook returned an invalid number of grad_input, got {}, but expected {}",
                  got, expected));
}

void fail_backward_pre_hook_length(std::size_t got, std::size_t expected) {
  fail<RuntimeError>(
      "dispatch.backward_pre_hook.bad_grad_output_count",
      fmt::format(
          "Backward pre hook returned an invalid number of grad_output, got {}, but expected {}",
          got, expected));
}

/// What torch::autograd::Function does with inputs it returns as they are: each comes out as a
/// view made without grad, whose history is the node (views of it may not be changed in place,
/// with PyTorch's error); inputs that do not require grad come out non-differentiable.
TensorList BackwardHookBase::wrap(const TensorList& tensors, bool output_side) {
  NodePtr node =
      make_node<HookNode>(c10::intrusive_ptr<BackwardHookBase>::reclaim_copy(this), output_side);
  node->set_next_edges(torch::autograd::collect_next_edges(tensors));
  TensorList views;
  views.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    at::Tensor view;
    {
      at::AutoGradMode no_grad(false);
      view = tensor.view_as(tensor);
    }
    if (tensor.requires_grad()) {
      const std::uint32_t input_nr = node->add_input_metadata(view);
      torch::autograd::impl::set_gradient_edge(view, {node, input_nr});
      torch::autograd::impl::get_view_autograd_meta(view)->set_creation_meta(
          torch::autograd::CreationMeta::IN_CUSTOM_FUNCTION);
    } else {
      node->add_input_metadata(torch::autograd::Node::undefined_input());
    }
    views.push_back(std::move(view));
  }
  return views;
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
    std::lock_guard<std::mutex> lock(grad_outputs_mutex_);
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
      fail<RuntimeError>(
          "dispatch.backward_hook.grad_without_input",
          "Backward hook for Modules where no input requires gradient should always return None "
          "or None for all gradients.");
    }
  }
  return gather(grad_output, output_positions_);
}

TensorList BackwardHookBase::input_grads_ready(const TensorList& grads) {
  // Reached without passing the outputs (double backward, autograd.grad on an intermediate):
  // Python leaves the gradients alone and calls no hook.
  std::optional<TensorList> handed;
  {
    std::lock_guard<std::mutex> lock(grad_outputs_mutex_);
    handed.swap(grad_outputs_);
  }
  if (!handed) return grads;
  TensorList grad_input = scatter(grads, input_positions_, n_inputs_);
  const TensorList grad_output = std::move(*handed);
  if (!run_full_hooks(grad_input, grad_output, /*check_length=*/true)) return grads;
  TensorList result = gather(grad_input, input_positions_);
  for (std::size_t i = 0; i < result.size(); ++i) {
    if (!grads[i].defined() && result[i].defined()) {
      fail<RuntimeError>("dispatch.backward_hook.replaced_none_grad",
                         "can't replace a None gradient with a non-None value");
    }
  }
  return result;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
