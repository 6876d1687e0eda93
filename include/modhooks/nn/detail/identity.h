// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "modhooks/core/detail/adapt.h"
#include "modhooks/core/detail/module_table.h"
#include "modhooks/version.h"

// Who a torch::nn module is and whether it is alive: what the call-hook registry (registry.h)
// and the state room both need, without the dispatch layer.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// "a hook on Linear cannot be tied to its lifetime ...": what `entry_for` throws.
[[noreturn]] void fail_unowned(const torch::nn::Module& module);

/// What tells an nn module's entries whether the module is still alive: the shared_ptr that owns
/// it (every ModuleHolder's), weakly. A module that nothing owns (on the stack, or inside its
/// constructor) cannot tell its death; see `data_entry_for`.
struct NnOwner {
  static NnOwner of(const torch::nn::Module& module) {
    std::weak_ptr<const torch::nn::Module> owner = module.weak_from_this();
    const bool owned = !owner.expired();
    return NnOwner{std::move(owner), owned};
  }
  bool alive() const noexcept { return !owned_ || !owner.expired(); }
  bool owned() const noexcept { return owned_; }

  std::weak_ptr<const torch::nn::Module> owner;
  bool owned_ = false;
};

/// The process's one table of `Hooks` entries of nn modules. Each is defined in the library, next
/// to the code that fills it (src/nn/registry.cpp for hooks, src/state/module_state.cpp for
/// state-dict hooks), never in a header: shared objects linked against a shared libmodhooks
/// see one table.
template <class Hooks>
ModuleTable<Hooks, NnOwner>& nn_table() noexcept;

/// The entry of `module` in `table` for plain data that captures nothing (names of
/// non-persistent buffers, a state-dict version), created on first use. A module is identified by
/// its address and, when a shared_ptr owns it (as every ModuleHolder does), by that ownership, so
/// an entry never passes to a new module built where a dead one was once the module was seen
/// owned: an entry made before (a buffer registered in the constructor) takes the owner at the
/// module's next lookup. A module that dies before any lookup while owned leaves its entry to
/// the next module at its address (a known defect: docs/state.md, "Modules without an owner").
template <class Hooks, class... Make>
std::shared_ptr<Hooks> data_entry_for(ModuleTable<Hooks, NnOwner>& table, torch::nn::Module& module,
                                      Make&&... make) {
  return table.get_or_create(&module, NnOwner::of(module), std::forward<Make>(make)...);
}

/// The same for hook lists. Hooks capture what their module's user gave them, so an entry
/// that could pass to a new module at a dead one's address would call hooks whose captures
/// are gone: a module not owned by a shared_ptr is refused.
template <class Hooks, class... Make>
std::shared_ptr<Hooks> entry_for(ModuleTable<Hooks, NnOwner>& table, torch::nn::Module& module,
                                 Make&&... make) {
  if (module.weak_from_this().expired()) fail_unowned(module);
  return data_entry_for(table, module, std::forward<Make>(make)...);
}

/// The entry of `module` in `table`, or null (see `data_entry_for` for the owner it takes).
template <class Hooks>
std::shared_ptr<Hooks> entry_find(ModuleTable<Hooks, NnOwner>& table,
                                  const torch::nn::Module& module) {
  return table.find(&module, NnOwner::of(module));
}

/// The kind of every nn module class is `torch::nn::Module`: hooks receive it as such, or as the
/// class they were registered on (see `invoke_hook`).
template <class T>
struct BaseOfT<T, std::enable_if_t<std::is_base_of_v<torch::nn::Module, T>>> {
  using type = torch::nn::Module;
};

/// The class name Python's `_get_name()` would print ("Linear" for `torch::nn::LinearImpl`).
std::string python_class_name(const torch::nn::Module& module);

/// The concrete module behind each accepted spelling: `Module&`, `shared_ptr<T>`,
/// `ModuleHolder<T>` (e.g. `torch::nn::Linear`).
template <class T, std::enable_if_t<std::is_base_of_v<torch::nn::Module, T>, int> = 0>
T& module_ref(T& module) noexcept {
  return module;
}
template <class T>
T& module_ref(const std::shared_ptr<T>& module) noexcept {
  return *module;
}
template <class T>
T& module_ref(const torch::nn::ModuleHolder<T>& module) noexcept {
  return *module.ptr();
}

/// Enables an overload for the nn module spellings only. The test is on the module found, since
/// the TorchScript adapter's `module_ref` may be visible here too.
template <class M>
using IfNnModule = std::enable_if_t<
    std::is_base_of_v<torch::nn::Module,
                      std::remove_reference_t<decltype(module_ref(std::declval<M&>()))>>,
    int>;

}  // namespace detail
MODHOOKS_END_NAMESPACE
