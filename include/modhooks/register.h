// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/adapt.h"
#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/jit/detail/registry.h"
#include "modhooks/nn/detail/registry.h"
#include "modhooks/registration/detail/module_ref.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

namespace detail {
/// What registering a forward hook sets up beyond the lists, per kind: TorchScript's always-call
/// hooks need full calls at the rewritten call sites (jit/detail/registry.h); others need none.
template <class M>
void forward_hook_added(M& /*module*/, bool /*always_call*/) noexcept {}
template <class M, class Stored>
void global_hook_added(M* /*kind*/, const Stored& /*stored*/) noexcept {}

/// Refuses backward hooks where they would reach a kind that runs forward only
/// (`KindTraits::backward`): it has no autograd graph to run them in.
template <bool kForwardOnly>
constexpr void require_backward() noexcept {
  static_assert(!kForwardOnly,
                "modhooks: backward hooks do not apply to this kind of module: it runs forward "
                "only, with no autograd graph (KindTraits::backward)");
}

}  // namespace detail

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
  detail::forward_hook_added(detail::module_ref(module), options.always_call());
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
  detail::require_backward<!detail::KindTraits<B>::backward>();
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
  detail::require_backward<!detail::KindTraits<B>::backward>();
  return detail::add_hook(
      detail::hooks_for(detail::module_ref(module)), &detail::ModuleHooks<B>::backward,
      detail::adapt_hook<TensorList, T, const TensorList&, const TensorList&>(std::move(hook)),
      prepend);
}

namespace detail {

/// Whether some kind whose tables take generic hooks can call `F`.
template <class F, class... A, class... K>
constexpr bool generic_kind_takes(KindList<K...> /*kinds*/) {
  return std::disjunction_v<std::conjunction<std::bool_constant<KindTraits<K>::generic_hooks>,
                                             std::is_invocable<F&, K&, A...>>...>;
}

/// Whether global hook `F` goes to the lists of kind `K`: any hook callable with it, for kinds
/// that take generic hooks; for the others, only a hook written for them (no generic kind takes
/// it), so that an `auto&` hook is never instantiated for them.
template <class F, class K, class... A>
constexpr bool reaches_kind() {
  if constexpr (KindTraits<K>::generic_hooks || !generic_kind_takes<F, A...>(Kinds{})) {
    return std::is_invocable_v<F&, K&, A...>;
  } else {
    return false;
  }
}

template <class F, class... A, class... K>
constexpr bool reaches_any_kind(KindList<K...> /*kinds*/) {
  return (reaches_kind<F, K, A...>() || ...);
}

/// Whether global hook `F` reaches a kind that runs forward only.
template <class F, class... A, class... K>
constexpr bool reaches_forward_only_kind(KindList<K...> /*kinds*/) {
  return ((!KindTraits<K>::backward && reaches_kind<F, K, A...>()) || ...);
}

/// Adds a global hook to the table of every kind it reaches (see `reaches_kind`): nn,
/// TorchScript or both as its callable takes `torch::nn::Module&`, `torch::jit::Module&` or
/// either (`auto&`); points for a hook taking `const aoti::Point&` or
/// `const executorch::Point&`. One id, one handle.
template <class Ret, class... A, class F, class Select, class Entry>
RemovableHandle add_global_hook(F hook, Select select, Entry entry, bool prepend) {
  static_assert(reaches_any_kind<F, A...>(Kinds{}),
                "modhooks: a global hook takes a module as one kind's hooks receive it (or auto&) "
                "and then the arguments Python passes to that kind of hook");
  const std::uint64_t id = next_hook_id.fetch_add(1);
  for_each_kind(Kinds{}, [&](auto* kind) {
    using K = std::remove_pointer_t<decltype(kind)>;
    if constexpr (reaches_kind<F, K, A...>()) {
      auto stored = entry(adapt_hook<Ret, K, A...>(hook));
      global_hook_added(kind, stored);
      select(*global_hooks<K>()).add(std::move(stored), prepend, id);
    }
  });
  return RemovableHandle(global_hook_remover(), id);
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
  detail::require_backward<detail::reaches_forward_only_kind<F, const TensorList&>(
      detail::Kinds{})>();
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
  detail::require_backward<detail::reaches_forward_only_kind<F, const TensorList&,
                                                             const TensorList&>(detail::Kinds{})>();
  return detail::add_global_hook<TensorList, const TensorList&, const TensorList&>(
      std::move(hook), [](auto& hooks) -> auto& { return hooks.backward; }, detail::same, false);
}

/// @}

MODHOOKS_END_NAMESPACE
