// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/adapt.h"
#include "modhooks/core/handle.h"
#include "modhooks/detail/module_ref.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/jit/detail/registry.h"
#include "modhooks/nn/detail/registry.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_register
/// @{

/// Python's `Module.register_forward_pre_hook`: `hook(module, args)` runs before `forward` and
/// may return replacement args (a vector of the same length).
///
/// **Example**:
/// \code
///   auto h = modhooks::register_forward_pre_hook(
///       fc, [](torch::nn::Module&, const std::vector<c10::IValue>& args) {
///         return std::vector<c10::IValue>{args[0].toTensor().clamp(-1, 1)};  // forward sees it
///       });
/// \endcode
template <class M, class F, detail::IfModule<M> = 0>
RemovableHandle register_forward_pre_hook(M&& module, F hook, ForwardHookOptions options = {}) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::hooks_for(detail::module_ref(module)), &detail::ModuleHooks<B>::forward_pre,
      detail::adapt_hook<detail::HookArgs, T, const detail::HookArgs&>(std::move(hook)),
      options.prepend());
}

/// Python's `Module.register_forward_hook`: `hook(module, args, output)` runs after `forward`
/// and may return a replacement output.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_forward_hook(
///       fc, [](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue& out) {
///         std::cout << out.toTensor().mean() << "\n";  // returns void: output unchanged
///       },
///       modhooks::ForwardHookOptions().always_call(true));
/// \endcode
template <class M, class F, detail::IfModule<M> = 0>
RemovableHandle register_forward_hook(M&& module, F hook, ForwardHookOptions options = {}) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  detail::ForwardHookEntry<B> entry{
      detail::adapt_hook<c10::IValue, T, const detail::HookArgs&, const c10::IValue&>(
          std::move(hook)),
      options.always_call()};
  auto handle =
      detail::add_hook(detail::hooks_for(detail::module_ref(module)),
                       &detail::ModuleHooks<B>::forward, std::move(entry), options.prepend());
  if constexpr (std::is_same_v<B, torch::jit::Module>) {
    if (options.always_call()) detail::require_full_calls(detail::module_ref(module));
  }
  return handle;
}

/// Python's `Module.register_full_backward_pre_hook`: `hook(module, grad_output)` runs when the
/// gradients of the module's outputs are ready and may return a replacement `grad_output`.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_pre_hook(
///       fc, [](torch::nn::Module&, const modhooks::TensorList& grad_output) {
///         return modhooks::TensorList{grad_output[0] * 0.5};
///       });
/// \endcode
template <class M, class F, detail::IfModule<M> = 0>
RemovableHandle register_full_backward_pre_hook(M&& module, F hook, bool prepend = false) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::hooks_for(detail::module_ref(module)), &detail::ModuleHooks<B>::backward_pre,
      detail::adapt_hook<TensorList, T, const TensorList&>(std::move(hook)), prepend);
}

/// Python's `Module.register_full_backward_hook`: `hook(module, grad_input, grad_output)` runs
/// when the gradients of the module's inputs are ready and may return a replacement
/// `grad_input`.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_hook(
///       fc, [](torch::nn::Module&, const modhooks::TensorList& grad_input,
///              const modhooks::TensorList& grad_output) {
///         // an undefined tensor stands where Python passes None
///         if (grad_input[0].defined()) std::cout << grad_input[0].norm() << "\n";
///       });
/// \endcode
template <class M, class F, detail::IfModule<M> = 0>
RemovableHandle register_full_backward_hook(M&& module, F hook, bool prepend = false) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::hooks_for(detail::module_ref(module)), &detail::ModuleHooks<B>::backward,
      detail::adapt_hook<TensorList, T, const TensorList&, const TensorList&>(std::move(hook)),
      prepend);
}

namespace detail {

/// Adds a global hook to the nn table, the TorchScript table or both, as its callable takes
/// `torch::nn::Module&`, `torch::jit::Module&` or either (`auto&`); one id, one handle.
template <class Ret, class... A, class F, class Select, class Entry>
RemovableHandle add_global_hook(F hook, Select select, Entry entry, bool prepend) {
  constexpr bool nn = std::is_invocable_v<F&, torch::nn::Module&, A...>;
  constexpr bool jit = std::is_invocable_v<F&, torch::jit::Module&, A...>;
  static_assert(nn || jit,
                "modhooks: a global hook takes torch::nn::Module&, torch::jit::Module& or auto& "
                "and then the arguments Python passes to that kind of hook");
  const std::uint64_t id = next_hook_id.fetch_add(1);
  if constexpr (nn) {
    select(*global_hooks<torch::nn::Module>())
        .add(entry(adapt_hook<Ret, torch::nn::Module, A...>(hook)), prepend, id);
  }
  if constexpr (jit) {
    auto stored = entry(adapt_hook<Ret, torch::jit::Module, A...>(hook));
    if constexpr (std::is_same_v<decltype(stored), ForwardHookEntry<torch::jit::Module>>) {
      if (stored.always_call) require_full_calls_everywhere();
    }
    select(*global_hooks<torch::jit::Module>()).add(std::move(stored), prepend, id);
  }
  return RemovableHandle(global_hook_tables(), id);
}

constexpr auto same = [](auto fn) { return fn; };

/// The module type of an adapted hook.
template <class F>
struct HookModule;
template <class R, class M, class... Rest>
struct HookModule<std::function<R(M&, Rest...)>> {
  using type = M;
};

}  // namespace detail

/// Python's `torch.nn.modules.module.register_module_forward_pre_hook`: runs for every module,
/// before the module's own pre-hooks. A hook taking `torch::jit::Module&` (or `auto&`) also
/// runs for TorchScript modules: at `call` and at every rewritten inner call site (rewritten by
/// `instrument`, or because a module of that type has a hook).
///
/// **Example**:
/// \code
///   auto h = modhooks::register_module_forward_pre_hook(
///       [](torch::nn::Module& m, const std::vector<c10::IValue>&) {
///         std::cout << "entering " << m.name() << "\n";
///       });
/// \endcode
template <class F>
RemovableHandle register_module_forward_pre_hook(F hook) {
  return detail::add_global_hook<detail::HookArgs, const detail::HookArgs&>(
      std::move(hook), [](auto& hooks) -> auto& { return hooks.forward_pre; }, detail::same, false);
}

/// Python's `register_module_forward_hook`: runs for every module, before its own forward hooks.
/// As for the pre-hook, a hook taking `torch::jit::Module&` (or `auto&`) also runs for
/// TorchScript modules.
///
/// **Example**:
/// \code
///   int calls = 0;
///   auto h = modhooks::register_module_forward_hook(  // nn and TorchScript modules
///       [&](auto&, const std::vector<c10::IValue>&, const c10::IValue&) { ++calls; });
/// \endcode
template <class F>
RemovableHandle register_module_forward_hook(F hook, ForwardHookOptions options = {}) {
  return detail::add_global_hook<c10::IValue, const detail::HookArgs&, const c10::IValue&>(
      std::move(hook), [](auto& hooks) -> auto& { return hooks.forward; },
      [always = options.always_call()](auto fn) {
        using M = typename detail::HookModule<decltype(fn)>::type;
        return detail::ForwardHookEntry<M>{std::move(fn), always};
      },
      options.prepend());
}

/// Python's `register_module_full_backward_pre_hook`: runs for every module, before its own
/// backward pre-hooks.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_module_full_backward_pre_hook(
///       modhooks::grad::check_finite());  // every module's grad_output
/// \endcode
template <class F>
RemovableHandle register_module_full_backward_pre_hook(F hook) {
  return detail::add_global_hook<TensorList, const TensorList&>(
      std::move(hook), [](auto& hooks) -> auto& { return hooks.backward_pre; }, detail::same,
      false);
}

/// Python's `register_module_full_backward_hook`: runs for every module, before its own full
/// backward hooks.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_module_full_backward_hook(
///       [](torch::nn::Module& m, const modhooks::TensorList&, const modhooks::TensorList&) {
///         std::cout << "backward through " << m.name() << "\n";
///       });
/// \endcode
template <class F>
RemovableHandle register_module_full_backward_hook(F hook) {
  return detail::add_global_hook<TensorList, const TensorList&, const TensorList&>(
      std::move(hook), [](auto& hooks) -> auto& { return hooks.backward; }, detail::same, false);
}

/// @}

MODHOOKS_END_NAMESPACE
