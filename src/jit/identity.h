// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <utility>

#include "modhooks/core/module_table.h"

namespace modhooks {
namespace detail {

/// A TorchScript module's entry in `table`: keyed by the object behind the handle, alive while
/// that object is.
template <class Hooks, class... Make>
std::shared_ptr<Hooks> jit_entry_for(ModuleTable<Hooks>& table, const torch::jit::Module& module,
                                     Make&&... make) {
  c10::weak_intrusive_ptr<c10::ivalue::Object> object(module._ivalue());
  return table.get_or_create(
      module._ivalue().get(), [object] { return !object.expired(); }, std::forward<Make>(make)...);
}

template <class Hooks>
std::shared_ptr<Hooks> jit_entry_find(ModuleTable<Hooks>& table, const torch::jit::Module& module) {
  return table.find(module._ivalue().get());
}

}  // namespace detail
}  // namespace modhooks
