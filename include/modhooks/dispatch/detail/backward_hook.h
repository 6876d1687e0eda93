// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <c10/util/Type.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The full-backward-hook wiring of one hooked call, Python's `torch.utils.hooks.BackwardHook`.
///
/// The module's tensor inputs and outputs pass through an identity autograd node, one
/// per side. When autograd reaches the output-side node, pre-hooks see (and may replace)
/// grad_output; when it reaches the input-side node, after the module's own backward, full
/// hooks see grad_input and grad_output and may replace grad_input. The hook lists are the
/// snapshots taken when forward ran.
class BackwardHookBase : public torch::CustomClassHolder {
 public:
  /// Passes `tensors`, the tensor arguments at `positions` among `n` arguments, through the
  /// input-side node and returns the views the module's forward must receive.
  TensorList setup_input(const TensorList& tensors, std::vector<std::size_t> positions,
                         std::size_t n);
  /// The same for the outputs; the caller receives the returned views.
  TensorList setup_output(const TensorList& tensors, std::vector<std::size_t> positions,
                          std::size_t n);

  /// Called by the identity nodes during backward.
  TensorList output_grads_ready(const TensorList& grads);
  TensorList input_grads_ready(const TensorList& grads);

 protected:
  virtual void run_pre_hooks(TensorList& grad_output) = 0;
  /// Returns whether any hook returned a replacement; checks its length when `check_length`.
  virtual bool run_full_hooks(TensorList& grad_input, const TensorList& grad_output,
                              bool check_length) = 0;
  virtual bool has_full_hooks() const = 0;

 private:
  TensorList wrap(const TensorList& tensors, bool output_side);

  std::size_t n_inputs_ = 0;
  std::vector<std::size_t> input_positions_;
  bool inputs_wrapped_ = false;
  std::size_t n_outputs_ = 0;
  std::vector<std::size_t> output_positions_;
  /// Handed from the output side to the input side. Two backward passes over one graph
  /// (`retain_graph`) may run the nodes on two threads at once: libtorch leaves a node's shared
  /// state to the node (torch/csrc/autograd/function.h), hence the lock.
  std::mutex grad_outputs_mutex_;
  std::optional<TensorList> grad_outputs_;
};

/// Invalid-length messages, PyTorch's text.
[[noreturn]] void fail_backward_hook_length(std::size_t got, std::size_t expected);
[[noreturn]] void fail_backward_pre_hook_length(std::size_t got, std::size_t expected);

template <class M>
class BackwardHook final : public BackwardHookBase {
 public:
  /// Runs the backward lists of `global` (the global hooks' snapshots, empty where none apply)
  /// and `local` (the module's).
  BackwardHook(M& module, std::shared_ptr<M> keep_alive, const HookSnapshots<M>& global,
               const HookSnapshots<M>& local)
      : module_(&module),
        keep_alive_(std::move(keep_alive)),
        global_pre_(global.backward_pre()),
        global_full_(global.backward()),
        local_pre_(local.backward_pre()),
        local_full_(local.backward()) {}

 private:
  void run_pre_hooks(TensorList& grad_output) override {
    for (const auto* list : {&global_pre_, &local_pre_}) {
      if (!*list) continue;
      for (const auto& entry : **list) {
        if (auto replaced = entry.hook(*module_, grad_output)) {
          if (replaced->size() != grad_output.size()) {
            fail_backward_pre_hook_length(replaced->size(), grad_output.size());
          }
          grad_output = std::move(*replaced);
        }
      }
    }
  }

  bool run_full_hooks(TensorList& grad_input, const TensorList& grad_output,
                      bool check_length) override {
    bool replaced_any = false;
    for (const auto* list : {&global_full_, &local_full_}) {
      if (!*list) continue;
      for (const auto& entry : **list) {
        if (auto replaced = entry.hook(*module_, grad_input, grad_output)) {
          if (check_length && replaced->size() != grad_input.size()) {
            fail_backward_hook_length(replaced->size(), grad_input.size());
          }
          grad_input = std::move(*replaced);
          replaced_any = true;
        }
      }
    }
    return replaced_any;
  }

  bool has_full_hooks() const override {
    return (global_full_ && !global_full_->empty()) || (local_full_ && !local_full_->empty());
  }

  M* module_;
  std::shared_ptr<M> keep_alive_;  // Python's BackwardHook holds the module too
  typename HookList<BackwardPreHookFn<M>>::Snapshot global_pre_;
  typename HookList<BackwardHookFn<M>>::Snapshot global_full_;
  typename HookList<BackwardPreHookFn<M>>::Snapshot local_pre_;
  typename HookList<BackwardHookFn<M>>::Snapshot local_full_;
};

template <class T>
struct IsTuple : std::false_type {};
template <class... Ts>
struct IsTuple<std::tuple<Ts...>> : std::true_type {};

/// Routes the top-level tensors of `values` (a tuple) through one side of `hook` in place.
/// Like Python, only top-level tensors count; tensors inside containers are not seen.
template <class Tuple>
void wrap_tuple(BackwardHookBase& hook, Tuple& values, bool output_side) {
  TensorList tensors;
  std::vector<std::size_t> positions;
  std::size_t i = 0;
  auto collect = [&](auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, at::Tensor>) {
      if (v.defined()) {
        tensors.push_back(v);
        positions.push_back(i);
      }
    }
    ++i;
  };
  std::apply([&](auto&... v) { (collect(v), ...); }, values);
  constexpr std::size_t n = std::tuple_size_v<Tuple>;
  TensorList wrapped = output_side ? hook.setup_output(tensors, positions, n)
                                   : hook.setup_input(tensors, positions, n);
  std::size_t k = 0;
  i = 0;
  auto write_back = [&](auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, at::Tensor>) {
      if (k < positions.size() && positions[k] == i) v = std::move(wrapped[k++]);
    }
    ++i;
  };
  std::apply([&](auto&... v) { (write_back(v), ...); }, values);
}

/// Output side: a Tensor counts as a 1-tuple; any other type gets Python's warning and no hooks.
template <class R>
void wrap_output(BackwardHookBase& hook, R& result) {
  if constexpr (std::is_same_v<R, at::Tensor>) {
    std::tuple<at::Tensor&> single(result);
    wrap_tuple(hook, single, /*output_side=*/true);
  } else if constexpr (IsTuple<R>::value) {
    wrap_tuple(hook, result, /*output_side=*/true);
  } else {
    TORCH_WARN(
        "For backward hooks to be called, module output should be a Tensor or a tuple of "
        "Tensors but received ",
        c10::demangle_type<R>());
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
