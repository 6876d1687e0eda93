// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/detail/module_table.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

// The call hooks of torch::nn modules: their table and the dispatch of one call.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

using NnHooks = ModuleHooks<torch::nn::Module>;

/// The global tables of this kind, instantiated in the library (src/nn/registry.cpp).
extern template struct GlobalHooksActive<torch::nn::Module>;
extern template const std::shared_ptr<ModuleHooks<torch::nn::Module>>&
global_hooks<torch::nn::Module>();

/// The hook table itself is a namespace-scope object of the library rather than a function's
/// static: every hooked call of an nn module reaches it (`dispatch_for`, inlined into the
/// caller), which would otherwise pay an out-of-line call and a static's guard check.
extern ModuleTable<NnHooks, NnOwner> nn_hooks_table;
template <>
inline ModuleTable<NnHooks, NnOwner>& nn_table<NnHooks>() noexcept {
  return nn_hooks_table;
}

/// The hook tables of `module`, or null when it has none.
std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module);

/// The dispatch of one call of `module`: snapshots of its hook lists, taken under the table's
/// lock, and of `global`'s (null where no global hooks apply). Inlined into the hooked call, as
/// everything a call runs between forward and its hooks.
MODHOOKS_ALWAYS_INLINE inline Dispatch<torch::nn::Module> dispatch_for(
    const torch::nn::Module& module, const NnHooks* global) {
  Dispatch<torch::nn::Module> dispatch(global);
  if (hooked_modules.may_have_hooks(&module)) {
    const auto take = [&](const std::shared_ptr<NnHooks>* hooks) MODHOOKS_ALWAYS_INLINE {
      if (hooks) dispatch.take_module_hooks(hooks->get(), /*local_guarded=*/true);
    };
    nn_table<NnHooks>().visit(&module, take);
  }
  return dispatch;
}

/// The hook tables of `module`, created on first use.
std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module);

}  // namespace detail
MODHOOKS_END_NAMESPACE
