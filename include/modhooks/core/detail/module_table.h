// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/detail/spin_lock.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Maps a module's identity (an address) to its hook lists.
///
/// libtorch modules have no slot for hooks, so they live beside the module. Each entry keeps the
/// module's `Owner`, a weak reference that tells whether the module is still alive, so that an
/// entry whose module died is never handed to a new module that reuses the address; dead entries
/// are dropped when seen and swept as the table grows, which also frees their hooks. `Owner` has
/// `bool alive() const noexcept` and `bool owned() const noexcept`; an owner that is not `owned`
/// cannot tell (an nn module that nothing owned yet) and counts as alive.
///
/// Every hooked call looks its module up here, so the map is a flat open-addressing table with a
/// multiplicative hash (no division, no node to chase) behind a spin lock.
template <class Hooks, class Owner>
class ModuleTable {
 public:
  /// The live module's tables, or null when it has none. An `owner` that can tell the module's
  /// death where the entry's owner could not (the module was owned since) becomes the entry's.
  std::shared_ptr<Hooks> find(const void* key, Owner owner = Owner()) {
    std::shared_ptr<Hooks> dead;  // destroyed after the lock: hooks' destructors may re-enter
    std::lock_guard<SpinLock> lock(lock_);
    const std::size_t at = live_position(key, dead);
    if (at == kNone) return nullptr;
    adopt(slots_[at], std::move(owner));
    return slots_[at].hooks;
  }

  /// Returns `f(&tables)` for the live module's tables, `f(nullptr)` where it has none, under the
  /// table's lock: a hooked call copies what it needs without taking a reference to the lists.
  /// `f` must be short and must not enter the table again.
  template <class F>
  MODHOOKS_ALWAYS_INLINE decltype(auto) visit(const void* key, F&& f) {
    {
      std::lock_guard<SpinLock> lock(lock_);
      const std::size_t at = position(key);
      if (at == kNone) return f(nullptr);
      if (slots_[at].owner.alive()) return f(&slots_[at].hooks);
    }
    return visit_dead(key, std::forward<F>(f));
  }

  /// The module's tables, created by `make` on first use. `owner` tells later whether the
  /// module is still the one at `key`.
  template <class Make>
  std::shared_ptr<Hooks> get_or_create(const void* key, Owner owner, Make&& make) {
    std::vector<Slot> old;  // dead entries and the old array die after the lock
    std::shared_ptr<Hooks> dead;
    std::lock_guard<SpinLock> lock(lock_);
    if (size_ + 1 > slots_.size() / 2) {
      // Full enough to sweep: keep the live entries, in an array four times their number or
      // more; the dead ones stay in `old`.
      old.swap(slots_);
      std::vector<Slot> live;
      for (Slot& slot : old) {
        if (slot.key && slot.owner.alive()) live.push_back(std::move(slot));
      }
      std::size_t capacity = kMinCapacity;
      while (capacity < 4 * (live.size() + 1)) capacity *= 2;
      slots_.resize(capacity);
      size_ = 0;
      for (Slot& slot : live) place(std::move(slot));
    }
    std::size_t at = live_position(key, dead);
    if (at == kNone) {
      at = place(Slot{key, std::move(owner), make()});
    } else {
      adopt(slots_[at], std::move(owner));
    }
    return slots_[at].hooks;
  }

  std::shared_ptr<Hooks> get_or_create(const void* key, Owner owner) {
    return get_or_create(key, std::move(owner), [] { return std::make_shared<Hooks>(); });
  }

  /// The table's lock, which may also guard what its entries hold (see `HookList`): whoever
  /// visits an entry then reads it under the lock the visit holds anyway.
  SpinLock& guard() noexcept { return lock_; }

  std::size_t size() {
    std::lock_guard<SpinLock> lock(lock_);
    return size_;
  }

 private:
  static constexpr std::size_t kMinCapacity = 64;
  static constexpr std::size_t kNone = ~std::size_t{0};
  struct Slot {
    const void* key = nullptr;  // null: free
    Owner owner;
    std::shared_ptr<Hooks> hooks;
  };

  /// `visit` where the entry found was of a dead module: erases it, out of the hooked call's way.
  template <class F>
  MODHOOKS_COLD decltype(auto) visit_dead(const void* key, F&& f) {
    std::shared_ptr<Hooks> dead;
    std::lock_guard<SpinLock> lock(lock_);
    const std::size_t at = live_position(key, dead);
    return f(at == kNone ? nullptr : &slots_[at].hooks);
  }

  /// Where the live entry of `key` is, or kNone; a dead one is erased, its hook lists moved to
  /// `dead` (to die after the lock).
  MODHOOKS_ALWAYS_INLINE std::size_t live_position(const void* key, std::shared_ptr<Hooks>& dead) {
    const std::size_t at = position(key);
    if (at == kNone || slots_[at].owner.alive()) return at;
    dead = std::move(slots_[at].hooks);
    erase(at);
    return kNone;
  }

  /// The module gained an owner since its entry was made: from now on the entry dies with it.
  static void adopt(Slot& slot, Owner&& owner) noexcept {
    if (!slot.owner.owned() && owner.owned()) slot.owner = std::move(owner);
  }

  MODHOOKS_ALWAYS_INLINE std::size_t home(const void* key) const noexcept {
    const auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
    return static_cast<std::size_t>((x * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
  }

  /// Where `key` is, or kNone.
  MODHOOKS_ALWAYS_INLINE std::size_t position(const void* key) const noexcept {
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

}  // namespace detail
MODHOOKS_END_NAMESPACE
