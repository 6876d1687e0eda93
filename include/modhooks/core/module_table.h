// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "modhooks/core/spin_lock.h"

namespace modhooks {
namespace detail {

/// Maps a module's identity (an address) to its hook tables.
///
/// libtorch modules have no slot for hooks, so they live beside the module. Each entry keeps a
/// liveness test (a weak reference to the module) so that an entry whose module died is never
/// handed to a new module that reuses the address; dead entries are dropped when seen and swept
/// as the table grows, which also frees their hooks.
///
/// Every hooked call looks its module up here, so the map is a flat open-addressing table with a
/// multiplicative hash (no division, no node to chase) behind a spin lock.
template <class Hooks>
class ModuleTable {
 public:
  using Alive = std::function<bool()>;

  /// The live module's tables, or null when it has none.
  std::shared_ptr<Hooks> find(const void* key) {
    std::shared_ptr<Hooks> dead;  // destroyed after the lock: hooks' destructors may re-enter
    std::lock_guard<SpinLock> lock(lock_);
    const std::size_t at = position(key);
    if (at == kNone) return nullptr;
    Slot& slot = slots_[at];
    if (slot.alive()) return slot.hooks;
    dead = std::move(slot.hooks);
    erase(at);
    return nullptr;
  }

  /// The module's tables, created by `make` on first use. `alive` tells later whether the
  /// module is still the one at `key`.
  template <class Make>
  std::shared_ptr<Hooks> get_or_create(const void* key, Alive alive, Make&& make) {
    std::vector<Slot> old;  // dead entries and the old array die after the lock
    std::lock_guard<SpinLock> lock(lock_);
    if (size_ + 1 > slots_.size() / 2) {
      // Full enough to sweep: keep the live entries, in an array four times their number or
      // more; the dead ones stay in `old`.
      old.swap(slots_);
      std::vector<Slot> live;
      for (Slot& slot : old) {
        if (slot.key && slot.alive()) live.push_back(std::move(slot));
      }
      std::size_t capacity = kMinCapacity;
      while (capacity < 4 * (live.size() + 1)) capacity *= 2;
      slots_.resize(capacity);
      size_ = 0;
      for (Slot& slot : live) place(std::move(slot));
    }
    std::size_t at = position(key);
    if (at != kNone && !slots_[at].alive()) {
      old.push_back(std::move(slots_[at]));
      erase(at);
      at = kNone;
    }
    if (at == kNone) at = place(Slot{key, std::move(alive), make()});
    return slots_[at].hooks;
  }

  std::shared_ptr<Hooks> get_or_create(const void* key, Alive alive) {
    return get_or_create(key, std::move(alive), [] { return std::make_shared<Hooks>(); });
  }

  std::size_t size() {
    std::lock_guard<SpinLock> lock(lock_);
    return size_;
  }

 private:
  static constexpr std::size_t kMinCapacity = 64;
  static constexpr std::size_t kNone = ~std::size_t{0};
  struct Slot {
    const void* key = nullptr;  // null: free
    Alive alive;
    std::shared_ptr<Hooks> hooks;
  };

  std::size_t home(const void* key) const noexcept {
    const auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
    return static_cast<std::size_t>((x * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
  }

  /// Where `key` is, or kNone.
  std::size_t position(const void* key) const noexcept {
    if (slots_.empty()) return kNone;
    for (std::size_t at = home(key);; at = (at + 1) & (slots_.size() - 1)) {
      if (slots_[at].key == key) return at;
      if (!slots_[at].key) return kNone;
    }
  }

  /// Puts `slot` (whose key is absent) at the first free place of its probe sequence.
  std::size_t place(Slot slot) {
    std::size_t at = home(slot.key);
    while (slots_[at].key) at = (at + 1) & (slots_.size() - 1);
    slots_[at] = std::move(slot);
    ++size_;
    return at;
  }

  /// Empties the place `at` (already moved from) and shifts later entries of the same probe run
  /// back, so that every lookup still finds its key before the first free place.
  void erase(std::size_t at) {
    const std::size_t mask = slots_.size() - 1;
    slots_[at] = Slot{};
    --size_;
    for (std::size_t next = (at + 1) & mask; slots_[next].key; next = (next + 1) & mask) {
      const std::size_t want = home(slots_[next].key);
      // Move `next` back into the hole unless its home lies cyclically in (at, next].
      const bool stays = at <= next ? (at < want && want <= next) : (at < want || want <= next);
      if (stays) continue;
      slots_[at] = std::move(slots_[next]);
      slots_[next] = Slot{};
      at = next;
    }
  }

  SpinLock lock_;
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

/// The process's one table of `Hooks` entries (one per module kind and layer).
template <class Hooks>
ModuleTable<Hooks>& table_of() {
  static ModuleTable<Hooks> table;
  return table;
}

}  // namespace detail
}  // namespace modhooks
