// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/detail/kinds.h"
#include "modhooks/core/handle.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The type hooks receive for a module of type `T`, its kind: `T` itself unless its adapter says
/// otherwise (nn: `torch::nn::Module` for every module class derived from it).
template <class T, class = void>
struct BaseOfT {
  using type = T;
};
template <class T>
using BaseOf = typename BaseOfT<T>::type;

/// Calls a user hook with the module as the type it was written for: the base type
/// (`torch::nn::Module&` or `torch::jit::Module&`), or the concrete `T&` of the module it was
/// registered on.
template <class T, class F, class... A>
decltype(auto) invoke_hook(F& hook, BaseOf<T>& module, A&&... args) {
  if constexpr (std::is_invocable_v<F&, BaseOf<T>&, A...>) {
    return hook(module, std::forward<A>(args)...);
  } else {
    // dynamic_cast: libtorch 1.13 modules derive from Module virtually.
    return hook(dynamic_cast<T&>(module), std::forward<A>(args)...);
  }
}

/// Whether a hook callable as `F&(BaseOf<T>&, A&...)` returns what its kind accepts: `void`
/// (no replacement), the kind's result type `Ret` (or a type that converts to it implicitly), or
/// `std::optional` of it (`std::nullopt` included). True for a hook that cannot be called at
/// all, which adapt_hook's first static_assert reports instead.
template <class Ret, class T, class F, class... A>
constexpr bool hook_returns_result() {
  if constexpr (std::is_invocable_v<F&, BaseOf<T>&, A&...> || std::is_invocable_v<F&, T&, A&...>) {
    using R = decltype(invoke_hook<T>(std::declval<F&>(), std::declval<BaseOf<T>&>(),
                                      std::declval<A&>()...));
    return std::is_void_v<R> || std::is_convertible_v<R, Ret> ||
           std::is_convertible_v<R, std::optional<Ret>>;
  } else {
    return true;
  }
}

/// Adapts any callable with a fitting signature, returning `void`, a value or an optional, to
/// the stored form. Done once at registration so dispatch pays nothing for the flexibility.
template <class Ret, class T, class... A, class F>
std::function<std::optional<Ret>(BaseOf<T>&, A...)> adapt_hook(F hook) {
  static_assert(std::is_invocable_v<F&, BaseOf<T>&, A...> || std::is_invocable_v<F&, T&, A...>,
                "modhooks: this hook cannot be called with the arguments of its hook kind "
                "(the module, then what Python passes to that kind of hook)");
  static_assert(hook_returns_result<Ret, T, F, A...>(),
                "modhooks: this hook must return void (nothing replaced), its hook kind's result "
                "type (the args vector for a forward pre-hook, the output IValue for a forward "
                "hook, a TensorList for a backward hook) or std::optional of it");
  return [hook = std::move(hook)](BaseOf<T>& module, A... args) mutable {
    using R = decltype(invoke_hook<T>(hook, module, args...));
    if constexpr (std::is_void_v<R>) {
      invoke_hook<T>(hook, module, args...);
      return std::optional<Ret>();
    } else {
      return std::optional<Ret>(invoke_hook<T>(hook, module, args...));
    }
  };
}

/// The same for hook kinds whose hooks edit their arguments in place and return nothing, as
/// Python requires of state-dict hooks.
template <class T, class... A, class F>
std::function<void(BaseOf<T>&, A...)> adapt_void_hook(F hook) {
  static_assert(std::is_invocable_v<F&, BaseOf<T>&, A...> || std::is_invocable_v<F&, T&, A...>,
                "modhooks: this hook cannot be called with the arguments of its hook kind "
                "(the module, then what Python passes to that kind of hook)");
  return [hook = std::move(hook)](BaseOf<T>& module, A... args) mutable {
    static_assert(std::is_void_v<decltype(invoke_hook<T>(hook, module, args...))>,
                  "modhooks: this kind of hook edits its arguments in place and must return void");
    invoke_hook<T>(hook, module, args...);
  };
}

template <class Hooks, class List, class Hook>
RemovableHandle add_hook(const std::shared_ptr<Hooks>& hooks, List Hooks::*list, Hook hook,
                         bool prepend) {
  auto& table = (*hooks).*list;
  return make_handle(hooks, table, table.add(std::move(hook), prepend));
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
