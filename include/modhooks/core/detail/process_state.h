// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>

#include "modhooks/version.h"

// The words every hook list of the process keeps current, which a call reads before anything
// else (defined in src/core/process_state.cpp).

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

}  // namespace detail
MODHOOKS_END_NAMESPACE
