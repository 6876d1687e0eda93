// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "modhooks/core/detail/kinds.h"
#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How many global hooks for modules of kind `M` exist: `call` reads it inline, beside the filter
/// of hooked modules, to send a module without hooks of any kind straight to `forward`. Defined
/// in the library (src/dispatch/global.cpp).
extern std::atomic<std::int64_t> global_nn_hooks_active;
extern std::atomic<std::int64_t> global_jit_hooks_active;
template <class M>
std::atomic<std::int64_t>& global_hooks_active() noexcept {
  if constexpr (std::is_same_v<M, torch::nn::Module>) {
    return global_nn_hooks_active;
  } else {
    return global_jit_hooks_active;
  }
}

/// The tables of `register_module_*` hooks for modules of kind `M` (`torch::nn::Module` or
/// `torch::jit::Module`), which run for every module of that kind before its own hooks.
template <class M>
const std::shared_ptr<ModuleHooks<M>>& global_hooks();

extern template const std::shared_ptr<ModuleHooks<torch::nn::Module>>&
global_hooks<torch::nn::Module>();
extern template const std::shared_ptr<ModuleHooks<torch::jit::Module>>&
global_hooks<torch::jit::Module>();

/// What the handle of a global hook points to: removes the id from every global list, nn and
/// TorchScript alike (a hook taking `auto&` sits in both).
const std::shared_ptr<HookTableBase>& global_hook_tables();

}  // namespace detail
MODHOOKS_END_NAMESPACE
