// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/state/module_state.h"

#include <c10/util/Type.h>

#include "modhooks/core/module_table.h"
#include "modhooks/state/detail/traversal.h"

namespace modhooks {
namespace detail {
namespace {

/// How the traversal walks torch::nn modules.
struct NnAdapter {
  using Module = torch::nn::Module;

  static std::vector<std::pair<std::string, std::shared_ptr<Module>>> children(Module& module) {
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
    for (const auto& child : module.named_children()) out.emplace_back(child.key(), child.value());
    return out;
  }

  /// Defined parameters, then defined buffers not marked non-persistent: libtorch registers an
  /// absent bias as an undefined tensor where Python has None, and Python skips those.
  static std::vector<OwnTensor> own_tensors(Module& module) {
    std::vector<OwnTensor> out;
    for (const auto& p : module.named_parameters(/*recurse=*/false)) {
      if (p.value().defined()) out.push_back(OwnTensor{p.key(), p.value()});
    }
    const auto state = find_state_hooks(module);
    std::unique_lock<std::mutex> lock;
    if (state) lock = std::unique_lock<std::mutex>(state->mutex);
    for (const auto& b : module.named_buffers(/*recurse=*/false)) {
      if (!b.value().defined()) continue;
      if (state && state->non_persistent_buffers.count(b.key())) continue;
      out.push_back(OwnTensor{b.key(), b.value()});
    }
    return out;
  }

  static std::shared_ptr<StateHooks<Module>> hooks(Module& module) {
    return find_state_hooks(module);
  }

  /// Python's `type(self).__name__`: the class name without namespaces or libtorch's "Impl".
  static std::string class_name(Module& module) { return python_class_name(module); }
};

}  // namespace

std::shared_ptr<NnStateHooks> find_state_hooks(const torch::nn::Module& module) {
  return table_of<NnStateHooks>().find(&module);
}

std::shared_ptr<NnStateHooks> state_hooks_for(torch::nn::Module& module) {
  return entry_for(table_of<NnStateHooks>(), module);
}

}  // namespace detail

StateDict state_dict(torch::nn::Module& module, const std::string& prefix, bool keep_vars) {
  return detail::state_dict<detail::NnAdapter>(module, prefix, keep_vars);
}

IncompatibleKeys load_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign) {
  return detail::load_state_dict<detail::NnAdapter>(module, state_dict, strict, assign);
}

}  // namespace modhooks
