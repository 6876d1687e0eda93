// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/detail/registry.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/nn/detail/clone.h"

// The global lists of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooks<torch::nn::Module>;

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
// Constant-initialised where the language can say so (C++20, as libtorch 2.x builds), so hooks
// registered during other translation units' static initialisation find it ready.
#ifdef __cpp_constinit
constinit ModuleTable<NnHooks, NnOwner> nn_hooks_table;
#else
ModuleTable<NnHooks, NnOwner> nn_hooks_table;
#endif

MODHOOKS_THREAD_LOCAL CallCache* nn_dispatch_cache = nullptr;

std::atomic<std::shared_ptr<torch::nn::Module> (*)(const torch::nn::Module&, const CloneCopy&)>
    clone_around_utilities{nullptr};

namespace {

MODHOOKS_THREAD_LOCAL bool dispatch_cache_gone = false;  // the thread is ending

/// Deletes the thread's call cache when the thread ends.
struct CallCacheOwner {
  CallCacheOwner() = default;
  CallCacheOwner(const CallCacheOwner&) = delete;
  CallCacheOwner& operator=(const CallCacheOwner&) = delete;
  ~CallCacheOwner() {
    dispatch_cache_gone = true;  // calls from the hooks' destructors take snapshots of their own
    delete std::exchange(nn_dispatch_cache, nullptr);
  }
};

/// Empties `slot`; returns what it held, to die after the slot is consistent again (a hook's
/// destructor may call modules).
CallSnapshots<torch::nn::Module> drop_slot(CachedCall& slot) noexcept {
  slot.key = nullptr;
  slot.owner = NnOwner();
  return {std::move(slot.global), std::move(slot.local)};
}

/// Drops the slots taken before the lists last changed, but those in use; `generation` is the
/// current one.
void drop_stale_slots(CallCache& cache, std::uint64_t generation) noexcept {
  if (cache.generation == generation) return;
  cache.generation = generation;
  for (CachedCall& slot : cache.slots) {
    if (slot.key != nullptr && !slot.busy && slot.generation != generation) drop_slot(slot);
  }
}

/// `hook_lists_changed_here`: a hook removed on this thread dies now, not at its next call.
void release_thread_snapshots() {
  if (CallCache* cache = nn_dispatch_cache) {
    drop_stale_slots(*cache, hook_lists_generation.load(std::memory_order_acquire));
  }
}

}  // namespace

CachedCall* fill_cached_call(const torch::nn::Module& module) {
  CallCache* cache = nn_dispatch_cache;
  if (cache == nullptr) {
    if (dispatch_cache_gone) return nullptr;
    static thread_local CallCacheOwner owner;  // constructed once per thread, here
    cache = nn_dispatch_cache = new CallCache();
    hook_lists_changed_here.store(&release_thread_snapshots, std::memory_order_release);
  }
  // Read before the snapshots are taken: a list changed meanwhile leaves the slot stale, never
  // a stale slot looking current.
  const std::uint64_t generation = hook_lists_generation.load(std::memory_order_acquire);
  drop_stale_slots(*cache, generation);
  CachedCall& slot = cache->slots[CallCache::index(&module)];
  if (slot.busy) return nullptr;
  const CallSnapshots<torch::nn::Module> dropped = drop_slot(slot);
  slot.owner = NnOwner::of(module);
  slot.global.take(global_hooks_if_any<torch::nn::Module>(), /*guarded=*/false);
  take_module_hooks(module, slot.local);
  slot.generation = generation;
  slot.key = &module;
  slot.busy = true;  // before the old snapshots die, whose hooks' destructors may call modules
  return &slot;
}

void release_stale_dispatch(CachedCall& slot) noexcept {
  drop_slot(slot);  // what it held dies here, the slot already empty
  release_thread_snapshots();
}

std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module) {
  if (!hooked_modules.may_have_hooks(&module)) return nullptr;
  return entry_find(nn_table<NnHooks>(), module);
}

std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module) {
  return entry_for(nn_table<NnHooks>(), module, [&] {
    // The table's lock guards the lists: a hooked call takes one lock, not two.
    return std::make_shared<NnHooks>(std::make_shared<FilterObserver>(&module),
                                     &nn_table<NnHooks>().guard());
  });
}

void fail_unowned(const torch::nn::Module& module) {
  fail<RuntimeError>(
      "nn.hook.unowned_module",
      "modhooks: a hook on " + python_class_name(module) +
          " cannot be tied to its lifetime: the module is not owned by a std::shared_ptr (it lives "
          "on the stack or by value, or its constructor is still running), so a module built later "
          "at its address would inherit the hook. Hold it in its holder (torch::nn::Linear) or a "
          "std::shared_ptr, and register hooks after construction.");
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
