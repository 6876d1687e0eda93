// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/registry.h"

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
  return entry_for(nn_table(), module);
}

const std::shared_ptr<NnHooks>& global_hooks() {
  static const std::shared_ptr<NnHooks> hooks = std::make_shared<NnHooks>();
  return hooks;
}

}  // namespace detail
}  // namespace modhooks
