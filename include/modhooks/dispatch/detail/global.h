// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The global hooks of modules of kind `M`, one set per kind, defined by the kind's adapter in
/// the library (global_tables.h) and declared `extern template` where its callers see it.
template <class M>
struct GlobalHooks {
  /// How many global hooks for modules of kind `M` exist: `call` reads it inline, beside the
  /// filter of hooked modules, to send a module without hooks of any kind straight to `forward`.
  static std::atomic<std::int64_t> count;
  /// The lists of `register_module_*` hooks for modules of kind `M`, which run for every module
  /// of that kind before its own hooks.
  static const std::shared_ptr<ModuleHooks<M>>& tables();
};
template <class M>
std::atomic<std::int64_t>& global_hooks_active() noexcept {
  return GlobalHooks<M>::count;
}
template <class M>
const std::shared_ptr<ModuleHooks<M>>& global_hooks() {
  return GlobalHooks<M>::tables();
}

/// Whether any global hook for modules of kind `M` exists: the one question every kind's call
/// asks before it snapshots the global lists (one relaxed load, inline).
template <class M>
MODHOOKS_ALWAYS_INLINE inline bool any_global_hooks() noexcept {
  return MODHOOKS_UNLIKELY(global_hooks_active<M>().load(std::memory_order_relaxed) != 0);
}

/// The global lists of kind `M` where any global hook exists, else null: what a call snapshots
/// beside the module's own lists.
template <class M>
MODHOOKS_ALWAYS_INLINE inline const ModuleHooks<M>* global_hooks_if_any() {
  return any_global_hooks<M>() ? global_hooks<M>().get() : nullptr;
}

/// What the handle of a global hook points to: removes the id from every kind's global lists (a
/// hook taking `auto&` sits in several).
const std::shared_ptr<HookRemover>& global_hook_remover();

/// Files `remove`, which removes an id from one kind's global lists, where `global_hook_remover`
/// reaches it: each kind's tables do so when they are made.
void add_global_tables(std::function<void(std::uint64_t)> remove);

}  // namespace detail
MODHOOKS_END_NAMESPACE
