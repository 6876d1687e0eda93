// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/registry.h"

namespace modhooks {
namespace detail {
std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module) {
  return table_of<NnHooks>().find(&module);
}

std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module) {
  return entry_for(table_of<NnHooks>(), module);
}

const std::shared_ptr<NnHooks>& global_hooks() {
  static const std::shared_ptr<NnHooks> hooks = std::make_shared<NnHooks>();
  return hooks;
}

}  // namespace detail
}  // namespace modhooks
