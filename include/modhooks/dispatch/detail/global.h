// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How many global hooks for modules of kind `M` exist: `call` reads it inline, beside the filter
/// of hooked modules, to send a module without hooks of any kind straight to `forward`. One
/// counter per kind, defined by the kind's adapter in the library (global_tables.h).
template <class M>
struct GlobalHooksActive {
  static std::atomic<std::int64_t> count;
};
template <class M>
std::atomic<std::int64_t>& global_hooks_active() noexcept {
  return GlobalHooksActive<M>::count;
}

/// The tables of `register_module_*` hooks for modules of kind `M`, which run for every module of
/// that kind before its own hooks; defined by the kind's adapter (global_tables.h).
template <class M>
const std::shared_ptr<ModuleHooks<M>>& global_hooks();

/// What the handle of a global hook points to: removes the id from every kind's global lists (a
/// hook taking `auto&` sits in several).
const std::shared_ptr<HookTableBase>& global_hook_tables();

/// Files `remove`, which removes an id from one kind's global lists, where `global_hook_tables`
/// reaches it: each kind's tables do so when they are made.
void add_global_tables(std::function<void(std::uint64_t)> remove);

}  // namespace detail
MODHOOKS_END_NAMESPACE
