// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <thread>

#include "modhooks/core/detail/inline.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A lock for the few instructions of a hook-table lookup or snapshot, taken on every hooked
/// call: one atomic exchange to take it and a plain release store to give it back, where
/// `std::mutex` pays two read-modify-writes. Holders never block inside it; a waiter yields
/// after a short spin, so a long holder (a sweep of dead entries) costs waiters CPU, not progress.
class SpinLock {
 public:
  /// The uncontended case inline, the wait out of line: a hooked call inlines only the exchange.
  MODHOOKS_ALWAYS_INLINE void lock() noexcept {
    if (locked_.exchange(true, std::memory_order_acquire)) wait();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  MODHOOKS_COLD void wait() noexcept {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  std::atomic<bool> locked_{false};
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
