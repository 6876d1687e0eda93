// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <utility>

#include "modhooks/core/detail/module_table.h"
#include "modhooks/version.h"

// Who a TorchScript module is and whether it is alive: what the call-hook registry (registry.h)
// and the state room both need, without the dispatch layer.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// `torch::jit::Module` is a value handle: every copy, every `named_children()` entry, names the
/// same object, so the object is the identity, and its hook lists are dropped once the object dies.
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

/// The class name Python's `_get_name()` prints ("Net" for "__torch__.Net").
std::string python_class_name(const torch::jit::Module& module);

}  // namespace detail
MODHOOKS_END_NAMESPACE
