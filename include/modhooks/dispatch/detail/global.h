// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "modhooks/core/detail/kinds.h"
#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How many global hooks for modules of kind `M` exist: `call` reads it inline, beside the filter
/// of hooked modules, to send a module without hooks of any kind straight to `forward`. One
/// counter per kind, defined in the library (src/dispatch/global.cpp).
template <class M>
struct GlobalHooksActive {
  static std::atomic<std::int64_t> count;
};
template <class M>
std::atomic<std::int64_t>& global_hooks_active() noexcept {
  return GlobalHooksActive<M>::count;
}

/// The tables of `register_module_*` hooks for modules of kind `M` (see kinds.h), which run for
/// every module of that kind before its own hooks.
template <class M>
const std::shared_ptr<ModuleHooks<M>>& global_hooks();

extern template struct GlobalHooksActive<torch::nn::Module>;
extern template struct GlobalHooksActive<torch::jit::Module>;
extern template struct GlobalHooksActive<const aoti::Point>;
extern template const std::shared_ptr<ModuleHooks<torch::nn::Module>>&
global_hooks<torch::nn::Module>();
extern template const std::shared_ptr<ModuleHooks<torch::jit::Module>>&
global_hooks<torch::jit::Module>();
extern template const std::shared_ptr<ModuleHooks<const aoti::Point>>&
global_hooks<const aoti::Point>();

/// What the handle of a global hook points to: removes the id from every kind's global lists (a
/// hook taking `auto&` sits in both nn's and TorchScript's).
const std::shared_ptr<HookTableBase>& global_hook_tables();

}  // namespace detail
MODHOOKS_END_NAMESPACE
