// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "modhooks/version.h"

// What every hook list of the process keeps current and a call reads before anything else: the
// count of hooks, the generation of the lists, the filter of hooked modules and the observers
// that keep it (the variables are defined in src/core/process_state.cpp).

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Hooks that take `call` off its fast path, counted over every live table of the process.
/// `call` reads it with one relaxed load before doing anything else; zero means "no hooks
/// anywhere", and the module's `forward` runs as if modhooks were not there. Defined in the
/// library (src/core/process_state.cpp).
extern std::atomic<std::int64_t> call_hooks_active;

/// Bumped after every change of a hook list (a hook added or removed, a list destroyed): a
/// snapshot that a thread keeps between calls (nn's call cache) is current while the
/// generation it was taken at still is. Defined in the library (src/core/process_state.cpp).
extern std::atomic<std::uint64_t> hook_lists_generation;

/// Run on the thread that changed a hook list, once the change is made and the list's locks are
/// released (null until a kind that keeps snapshots between calls sets it): nn's call cache
/// drops this thread's snapshots there, so that a hook removed on the thread that calls its
/// module dies at its removal, as in Python. Defined in the library (src/core/process_state.cpp).
extern std::atomic<void (*)()> hook_lists_changed_here;

/// Tells `hook_lists_changed_here`, if set.
inline void tell_hook_lists_changed() {
  if (void (*changed)() = hook_lists_changed_here.load(std::memory_order_acquire)) changed();
}

/// Told how many hooks a list gained or lost, beside `call_hooks_active`: the filter of hooked
/// modules is kept this way, and TorchScript models rewrite their code when their first inner
/// hook arrives and restore it when the last one goes.
class HookObserver {
 public:
  virtual ~HookObserver() = default;
  virtual void hooks_changed(std::int64_t delta) noexcept = 0;
};

/// A counting filter over the addresses of modules that have call hooks: how many such modules
/// hash to each slot. A zero slot proves that a module has none, with one load and no lock, so a
/// module without hooks pays almost nothing while other modules have some; a non-zero slot
/// sends the call on to the locked table.
class HookedModuleFilter {
 public:
  bool may_have_hooks(const void* key) const noexcept {
    return slots_[slot(key)].load(std::memory_order_relaxed) != 0;
  }
  void add(const void* key, std::int64_t delta) noexcept {
    slots_[slot(key)].fetch_add(static_cast<std::uint32_t>(delta), std::memory_order_relaxed);
  }

 private:
  static constexpr int kBits = 12;
  static std::size_t slot(const void* key) noexcept {
    auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
    return static_cast<std::size_t>((x * 0x9E3779B97F4A7C15ull) >> (64 - kBits));
  }
  std::atomic<std::uint32_t> slots_[std::size_t{1} << kBits] = {};
};

/// The filter of the process's hooked modules, defined in the library
/// (src/core/process_state.cpp).
extern HookedModuleFilter hooked_modules;

/// Keeps a module's slot in `hooked_modules` counted while any of its call-hook lists is
/// non-empty.
class FilterObserver : public HookObserver {
 public:
  explicit FilterObserver(const void* key) noexcept : key_(key) {}
  void hooks_changed(std::int64_t delta) noexcept override {
    const std::int64_t before = total_.fetch_add(delta, std::memory_order_relaxed);
    if (before == 0 && delta > 0) hooked_modules.add(key_, 1);
    if (before != 0 && before + delta == 0) hooked_modules.add(key_, -1);
  }

 private:
  const void* key_;
  std::atomic<std::int64_t> total_{0};
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
