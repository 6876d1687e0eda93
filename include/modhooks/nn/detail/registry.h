// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "modhooks/core/detail/hook_list.h"
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

/// The global lists of this kind, instantiated in the library (src/nn/registry.cpp).
extern template struct GlobalHooks<torch::nn::Module>;

/// The hook table itself is a namespace-scope object of the library rather than a function's
/// static: every hooked call of an nn module reaches it (`take_module_hooks`, inlined into the
/// caller), which would otherwise pay an out-of-line call and a static's guard check.
extern ModuleTable<NnHooks, NnOwner> nn_hooks_table;
template <>
inline ModuleTable<NnHooks, NnOwner>& nn_table<NnHooks>() noexcept {
  return nn_hooks_table;
}

/// The hook lists of `module`, or null when it has none.
std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module);

/// Snapshots of the hook lists of `module`, taken under the table's lock, into `local`.
MODHOOKS_ALWAYS_INLINE inline void take_module_hooks(const torch::nn::Module& module,
                                                     HookSnapshots<torch::nn::Module>& local) {
  if (hooked_modules.may_have_hooks(&module)) {
    const auto take = [&](const std::shared_ptr<NnHooks>* hooks) MODHOOKS_ALWAYS_INLINE {
      if (hooks) local.take(hooks->get(), /*guarded=*/true);
    };
    nn_table<NnHooks>().visit(&module, take);
  }
}

/// The hook lists of `module`, created on first use.
std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module);

/// The snapshots of one module's lists and the global ones, as this thread last took them (see
/// `CallCache`), and the vector its calls show their arguments in. Three cache lines,
/// aligned; a hit where no global hooks exist reads the first two alone.
struct alignas(64) CachedCall {
  const torch::nn::Module* key = nullptr;  // null: holds nothing
  std::uint64_t generation = 0;            // `hook_lists_generation` when taken
  NnOwner owner;      // tells a new module at `key` from the one whose snapshots these are
  bool busy = false;  // a call under way on this thread borrows the snapshots and `shown_args`
  HookSnapshots<torch::nn::Module> local;
  HookArgs shown_args;  // Nones between calls (see `ShownArgs`), kept when the slot is refilled
  HookSnapshots<torch::nn::Module> global;
};

/// The snapshots of the modules this thread called last, so that a hooked call borrows them
/// (a `CallImpl` runs snapshots it borrows) instead of taking the table's lock and a reference to
/// each list: while no hook list anywhere changed since they were taken, they are the lists a new
/// snapshot would give. A slot per module address, direct-mapped. The slots hold references, so
/// a removed hook lives on in the caches that hold it until each lets go of its stale slots: the
/// removing thread's at once (`hook_lists_changed_here`), a slot in use when its call ends, and
/// another thread's at its next hooked call or when it ends.
struct CallCache {
  static constexpr int kBits = 8;
  static std::size_t index(const void* key) noexcept {
    const auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
    return static_cast<std::size_t>((x * 0x9E3779B97F4A7C15ull) >> (64 - kBits));
  }
  std::uint64_t generation = 0;  // the slots not in use were dropped at this generation
  CachedCall slots[std::size_t{1} << kBits];
};

/// This thread's cache, made by its first hooked call and deleted when it ends
/// (src/nn/registry.cpp).
extern MODHOOKS_THREAD_LOCAL CallCache* nn_dispatch_cache;

/// `cached_call` where the slot of `module` is not current: takes the snapshots anew into it
/// and pins it. Null where the slot is in use by a call under way on this thread (`module` called
/// inside its own call, or another module whose slot it shares), or the thread is ending.
MODHOOKS_COLD CachedCall* fill_cached_call(const torch::nn::Module& module);

/// Unpins `slot` after its call, during which hook lists changed: the snapshots it held die now
/// (a hook that removed itself dies when its call ends, as in Python), with this thread's other
/// stale ones.
MODHOOKS_COLD void release_stale_dispatch(CachedCall& slot) noexcept;

/// The current snapshots of `module`'s lists and the global ones, pinned for the call (`busy`,
/// which the caller clears): without a lock or a reference while they are in this thread's
/// cache. Null where the call must take snapshots of its own (see `fill_cached_call`).
MODHOOKS_ALWAYS_INLINE inline CachedCall* cached_call(const torch::nn::Module& module) {
  if (CallCache* cache = nn_dispatch_cache; MODHOOKS_LIKELY(cache != nullptr)) {
    CachedCall& slot = cache->slots[CallCache::index(&module)];
    if (MODHOOKS_LIKELY(slot.key == &module &&
                        slot.generation == hook_lists_generation.load(std::memory_order_relaxed) &&
                        !slot.busy && slot.owner.alive())) {
      slot.busy = true;
      return &slot;
    }
  }
  return fill_cached_call(module);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
