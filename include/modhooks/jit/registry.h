// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <utility>

#include "modhooks/core/module_table.h"
#include "modhooks/dispatch/hook_types.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Where TorchScript modules' hooks live. `torch::jit::Module` is a value handle: every copy,
/// every `named_children()` entry, names the same object, so the object is the identity, and
/// its tables are dropped once the object dies.
using JitHooks = ModuleHooks<torch::jit::Module>;

inline torch::jit::Module& module_ref(const torch::jit::Module& module) noexcept {
  return const_cast<torch::jit::Module&>(module);  // a handle: hooks attach to its object
}

/// What tells a TorchScript module's entries whether its object is still alive.
struct JitOwner {
  bool alive() const noexcept { return !object.expired(); }
  bool owned() const noexcept { return true; }

  c10::weak_intrusive_ptr<c10::ivalue::Object> object{c10::intrusive_ptr<c10::ivalue::Object>()};
};

/// The process's one table of `Hooks` entries of TorchScript modules, defined in the library as
/// `nn_table`'s are (src/jit/registry.cpp, src/state/jit_module_state.cpp).
template <class Hooks>
ModuleTable<Hooks, JitOwner>& jit_table() noexcept;
template <>
ModuleTable<JitHooks, JitOwner>& jit_table<JitHooks>() noexcept;

/// A TorchScript module's entry in `table`: keyed by the object behind the handle, alive while
/// that object is.
template <class Hooks, class... Make>
std::shared_ptr<Hooks> jit_entry_for(ModuleTable<Hooks, JitOwner>& table,
                                     const torch::jit::Module& module, Make&&... make) {
  JitOwner owner{c10::weak_intrusive_ptr<c10::ivalue::Object>(module._ivalue())};
  return table.get_or_create(module._ivalue().get(), std::move(owner), std::forward<Make>(make)...);
}

template <class Hooks>
std::shared_ptr<Hooks> jit_entry_find(ModuleTable<Hooks, JitOwner>& table,
                                      const torch::jit::Module& module) {
  return table.find(module._ivalue().get());
}

std::shared_ptr<JitHooks> find_hooks(const torch::jit::Module& module);
/// Also rewrites the model's call sites of `module`'s type, so that hooks on an inner
/// submodule fire where its parents call it (see `instrument`).
std::shared_ptr<JitHooks> hooks_for(torch::jit::Module& module);

/// Makes the rewritten call sites of `module`'s model run the submodule themselves, inside a
/// try block: needed once an always-call forward hook is registered on one of its modules.
void require_full_calls(const torch::jit::Module& module);

/// The same for every model, for the rest of the process: a global always-call hook arrived.
void require_full_calls_everywhere();

/// The class name Python's `_get_name()` prints ("Net" for "__torch__.Net").
std::string python_class_name(const torch::jit::Module& module);

}  // namespace detail
MODHOOKS_END_NAMESPACE
