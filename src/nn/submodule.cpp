// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// How an nn module is named and found by path: Python's `_get_name()` and `get_submodule`. Apart
// from the registry (registry.cpp), which holds the hooks and the per-thread call cache.
#include "modhooks/nn/submodule.h"

#include <algorithm>
#include <memory>
#include <string>

#include "modhooks/core/detail/dotted_path.h"
#include "modhooks/core/error.h"
#include "modhooks/nn/detail/identity.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

std::string python_class_name(const torch::nn::Module& module) {
  std::string name = module.name();
  name.resize(std::min(name.size(), name.find('<')));  // a template's arguments are not its name
  const auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  const std::string impl = "Impl";
  if (name.size() > impl.size() &&
      name.compare(name.size() - impl.size(), impl.size(), impl) == 0) {
    name.resize(name.size() - impl.size());
  }
  return name;
}

std::shared_ptr<torch::nn::Module> submodule(torch::nn::Module& root, const std::string& name) {
  std::shared_ptr<torch::nn::Module> module = root.weak_from_this().lock();
  if (!module)
    fail<RuntimeError>("nn.submodule.unowned_root",
                       "modhooks: submodule() needs a root owned by a shared_ptr (as holders are)");
  for_each_path_item(name, [&](const std::string& item, bool /*first*/) {
    const auto children = module->named_children();
    if (const auto* child = children.find(item)) {
      module = *child;
    } else if (module->named_parameters(/*recurse=*/false).contains(item) ||
               module->named_buffers(/*recurse=*/false).contains(item)) {
      fail<AttributeError>("nn.submodule.not_a_module", "`" + item + "` is not an nn.Module");
    } else {
      fail<AttributeError>("nn.submodule.no_attribute",
                           python_class_name(*module) + " has no attribute `" + item + "`");
    }
  });
  return module;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
