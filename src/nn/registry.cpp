// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/detail/registry.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>

#include "modhooks/core/detail/dotted_path.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/nn/submodule.h"

// The global tables of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooksActive<torch::nn::Module>;
template const std::shared_ptr<modhooks::detail::ModuleHooks<torch::nn::Module>>&
modhooks::detail::global_hooks<torch::nn::Module>();

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
// Constant-initialised where the language can say so (C++20, as libtorch 2.x builds), so hooks
// registered during other translation units' static initialisation find it ready.
#ifdef __cpp_constinit
constinit ModuleTable<NnHooks, NnOwner> nn_hooks_table;
#else
ModuleTable<NnHooks, NnOwner> nn_hooks_table;
#endif

std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module) {
  if (!hooked_modules.may_have_hooks(&module)) return nullptr;
  return entry_find(nn_table<NnHooks>(), module);
}

std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module) {
  return entry_for(nn_table<NnHooks>(), module, [&] {
    // The table's lock guards the lists: a hooked call takes one lock, not two.
    return std::make_shared<NnHooks>(std::make_shared<FilterObserver>(&module),
                                     &nn_table<NnHooks>().guard());
  });
}

void fail_unowned(const torch::nn::Module& module) {
  fail<RuntimeError>(
      "nn.hook.unowned_module",
      "modhooks: a hook on " + python_class_name(module) +
          " cannot be tied to its lifetime: the module is not owned by a std::shared_ptr (it lives "
          "on the stack or by value, or its constructor is still running), so a module built later "
          "at its address would inherit the hook. Hold it in its holder (torch::nn::Linear) or a "
          "std::shared_ptr, and register hooks after construction.");
}

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
                       "modhooks::submodule needs a root owned by a shared_ptr (as holders are)");
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
