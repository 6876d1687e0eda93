// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class Instrumentation;

/// The rewriting state of the compilation unit that holds `module`'s type (one per loaded file
/// or scripting process), created on first use.
std::shared_ptr<Instrumentation> instrumentation_for(const torch::jit::Module& module);

/// Makes the call sites of `module`'s type pass through modhooks before a hook is added to it.
/// Throws when the code cannot be rewritten.
void prepare_inner_hooks(Instrumentation& instrumentation, const torch::jit::Module& module);

/// The observer that the hook lists of `module` report to, so that the code is restored once
/// the last hook on a module of the unit is gone.
std::shared_ptr<HookObserver> inner_hook_observer(const std::shared_ptr<Instrumentation>& inst,
                                                  const torch::jit::Module& module);

}  // namespace detail
MODHOOKS_END_NAMESPACE
