// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "loader.h"
#include "modhooks/jit/detail/identity.h"
#include "modhooks/state/detail/load.h"
#include "modhooks/state/module_state.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// How the traversal walks TorchScript modules: the same algorithm as for nn modules.
struct JitAdapter {
  using Module = torch::jit::Module;

  static std::vector<std::pair<std::string, std::shared_ptr<Module>>> children(Module& module) {
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
    for (const auto& child : module.named_children()) {
      out.emplace_back(child.name, std::make_shared<Module>(child.value));
    }
    return out;
  }

  static std::pair<const std::string&, const at::Tensor&> entry(
      const torch::jit::Named<at::Tensor>& item) {
    return {item.name, item.value};
  }

  static std::shared_ptr<StateHooks<Module>> hooks(Module& module) {
    return find_state_hooks(module);
  }

  static std::string class_name(Module& module) { return python_class_name(module); }

  /// A scripted module's state dict carries version 1 (`RecursiveScriptModule`'s), and old
  /// state dicts are upgraded by the Python classes only, never inside TorchScript.
  static std::int64_t version(Module&) { return 1; }
  template <class Edit>
  static void upgrade(Module&, const std::string&, const Metadata&, const StateDict&, Edit&&,
                      std::vector<std::string>&) {}
};

}  // namespace

template <>
ModuleTable<JitStateHooks, JitOwner>& jit_table<JitStateHooks>() noexcept {
  static ModuleTable<JitStateHooks, JitOwner> table;
  return table;
}

std::shared_ptr<JitStateHooks> find_state_hooks(const torch::jit::Module& module) {
  return jit_entry_find(jit_table<JitStateHooks>(), module);
}

std::shared_ptr<JitStateHooks> state_hooks_for(torch::jit::Module& module) {
  return jit_entry_for(jit_table<JitStateHooks>(), module);
}

IncompatibleKeys load_state_dict(const torch::jit::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign, TensorCopy* copy) {
  return load_state_dict<JitAdapter>(module_ref(module), state_dict, strict, assign, copy);
}

}  // namespace detail

StateDict state_dict(const torch::jit::Module& module, const std::string& prefix, bool keep_vars) {
  return detail::state_dict<detail::JitAdapter>(detail::module_ref(module), prefix, keep_vars);
}

IncompatibleKeys load_state_dict(const torch::jit::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign) {
  return detail::load_state_dict(module, state_dict, strict, assign, nullptr);
}

MODHOOKS_END_NAMESPACE
