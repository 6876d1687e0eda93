// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>

#include "modhooks/core/detail/module_table.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/jit/detail/identity.h"
#include "modhooks/version.h"

// The call hooks of TorchScript modules: their table, and the instrumentation that makes inner
// submodules reach them.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Where TorchScript modules' call hooks live, keyed by the object (identity.h).
using JitHooks = ModuleHooks<torch::jit::Module>;

/// The global lists of this kind, instantiated in the library (src/jit/registry.cpp).
extern template struct GlobalHooks<torch::jit::Module>;

template <>
ModuleTable<JitHooks, JitOwner>& jit_table<JitHooks>() noexcept;

std::shared_ptr<JitHooks> find_hooks(const torch::jit::Module& module);
/// Also rewrites the model's call sites of `module`'s type, so that hooks on an inner
/// submodule fire where its parents call it (see `instrument`).
std::shared_ptr<JitHooks> hooks_for(torch::jit::Module& module);

/// Makes the rewritten call sites of `module`'s model run the submodule themselves, inside a
/// try block: needed once an always-call forward hook is registered on one of its modules.
void require_full_calls(const torch::jit::Module& module);

/// The same for every model, for the rest of the process: a global always-call hook arrived.
void require_full_calls_everywhere();

/// What registering a forward hook sets up for TorchScript modules beyond the lists (see
/// register.h): an always-call hook needs full calls.
inline void forward_hook_added(torch::jit::Module& module, bool always_call) {
  if (always_call) require_full_calls(module);
}
inline void global_hook_added(torch::jit::Module* /*kind*/,
                              const ForwardHookEntry<torch::jit::Module>& stored) {
  if (stored.always_call) require_full_calls_everywhere();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
