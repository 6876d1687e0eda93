// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/jit/registry.h"

#include "identity.h"

namespace modhooks {
namespace detail {
std::shared_ptr<JitHooks> find_hooks(const torch::jit::Module& module) {
  return jit_entry_find(table_of<JitHooks>(), module);
}

std::shared_ptr<JitHooks> hooks_for(torch::jit::Module& module) {
  return jit_entry_for(table_of<JitHooks>(), module);
}

}  // namespace detail
}  // namespace modhooks
