// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "modhooks/core/module_table.h"
#include "modhooks/dispatch/hook_types.h"

namespace modhooks {
namespace detail {

using NnHooks = ModuleHooks<torch::nn::Module>;

/// "a hook on Linear cannot be tied to its lifetime ...": what `entry_for` throws.
[[noreturn]] void fail_unowned(const torch::nn::Module& module);

/// The entry of `module` in `table` for plain data that captures nothing (names of
/// non-persistent buffers, a state-dict version), created on first use. A module is identified by
/// its address and, when a shared_ptr owns it (as every ModuleHolder does), by that ownership, so
/// an entry made while a shared_ptr owns the module never passes to a new module built where a
/// dead one was. A module not owned by a shared_ptr (on the stack, or inside its constructor)
/// cannot tell its death: its entry lives as long as the process, and stays the module's entry
/// once it is owned, so `entry_for` below hands it out too (a known defect: docs/state.md,
/// "Modules without an owner").
template <class Hooks, class... Make>
std::shared_ptr<Hooks> data_entry_for(ModuleTable<Hooks>& table, torch::nn::Module& module,
                                      Make&&... make) {
  std::weak_ptr<torch::nn::Module> owner = module.weak_from_this();
  if (owner.expired()) {
    return table.get_or_create(
        &module, [] { return true; }, std::forward<Make>(make)...);
  }
  return table.get_or_create(
      &module, [owner] { return !owner.expired(); }, std::forward<Make>(make)...);
}

/// The same for hook tables. Hooks capture what their module's user gave them, so an entry
/// that could pass to a new module at a dead one's address would call hooks whose captures
/// are gone: a module not owned by a shared_ptr is refused.
template <class Hooks, class... Make>
std::shared_ptr<Hooks> entry_for(ModuleTable<Hooks>& table, torch::nn::Module& module,
                                 Make&&... make) {
  if (module.weak_from_this().expired()) fail_unowned(module);
  return data_entry_for(table, module, std::forward<Make>(make)...);
}

/// The hook tables of `module`, or null when it has none.
std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module);

/// The hook tables of `module`, created on first use.
std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module);

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
}  // namespace modhooks
