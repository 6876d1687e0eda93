// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/jit/registry.h"

#include "identity.h"

namespace modhooks {
namespace detail {
namespace {

ModuleTable<JitHooks>& jit_table() {
  static ModuleTable<JitHooks> table;
  return table;
}

}  // namespace

std::shared_ptr<JitHooks> find_hooks(const torch::jit::Module& module) {
  return jit_entry_find(jit_table(), module);
}

std::shared_ptr<JitHooks> hooks_for(torch::jit::Module& module) {
  return jit_entry_for(jit_table(), module);
}

}  // namespace detail
}  // namespace modhooks
