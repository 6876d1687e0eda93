// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/registry.h"

#include "modhooks/core/module_table.h"

namespace modhooks {
namespace detail {
namespace {

ModuleTable<NnHooks>& nn_table() {
  static ModuleTable<NnHooks> table;
  return table;
}

}  // namespace

std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module) {
  return nn_table().find(&module);
}

std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module) {
  std::weak_ptr<torch::nn::Module> owner = module.weak_from_this();
  if (owner.expired()) {
    // Not owned by a shared_ptr (a module on the stack): nothing can tell its death, so its
    // tables live as long as the process unless its handles remove the hooks.
    return nn_table().get_or_create(&module, [] { return true; });
  }
  return nn_table().get_or_create(&module, [owner] { return !owner.expired(); });
}

const std::shared_ptr<NnHooks>& global_hooks() {
  static const std::shared_ptr<NnHooks> hooks = std::make_shared<NnHooks>();
  return hooks;
}

}  // namespace detail
}  // namespace modhooks
