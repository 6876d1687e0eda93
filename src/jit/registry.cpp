// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/jit/detail/registry.h"

#include <cstddef>
#include <string>

#include "hooked_call.h"
#include "instrumentation.h"
#include "modhooks/core/detail/dotted_path.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/jit/instrument.h"

// The global lists of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooks<torch::jit::Module>;

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
template <>
ModuleTable<JitHooks, JitOwner>& jit_table<JitHooks>() noexcept {
  static ModuleTable<JitHooks, JitOwner> table;
  return table;
}

std::shared_ptr<JitHooks> find_hooks(const torch::jit::Module& module) {
  return find_hooks(module._ivalue().get());
}

std::shared_ptr<JitHooks> find_hooks(const c10::ivalue::Object* object) {
  if (!hooked_modules.may_have_hooks(object)) return nullptr;
  return jit_table<JitHooks>().find(object);
}

std::shared_ptr<JitHooks> hooks_for(torch::jit::Module& module) {
  auto instrumentation = instrumentation_for(module);
  prepare_inner_hooks(*instrumentation, module);
  return jit_entry_for(jit_table<JitHooks>(), module, [&] {
    return std::make_shared<JitHooks>(inner_hook_observer(instrumentation, module));
  });
}

std::string python_class_name(const torch::jit::Module& module) {
  const auto& name = module.type()->name();
  return name ? name->name() : std::string("ScriptModule");
}

}  // namespace detail

torch::jit::Module submodule(const torch::jit::Module& root, const std::string& name) {
  torch::jit::Module module = root;
  detail::for_each_path_item(name, [&](const std::string& item, bool first) {
    if (!module.hasattr(item)) {
      std::string message = detail::python_class_name(module) + " has no attribute `" + item + "`";
      if (first && module.named_children().size() == 0) {
        message +=
            " (a frozen or inference-optimized model keeps no submodules: nothing inside "
            "it can be hooked)";
      }
      detail::fail<AttributeError>("jit.submodule.no_attribute", message);
    }
    const c10::IValue value = module.attr(item);
    if (!value.isObject() || !value.toObjectRef().type()->is_module()) {
      detail::fail<AttributeError>("jit.submodule.not_a_module",
                                   "`" + item + "` is not an nn.Module");
    }
    module = torch::jit::Module(value.toObject());
  });
  return module;
}

MODHOOKS_END_NAMESPACE
