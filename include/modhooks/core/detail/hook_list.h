// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/detail/process_state.h"
#include "modhooks/core/detail/shared_vector.h"
#include "modhooks/core/detail/spin_lock.h"
#include "modhooks/core/handle.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A word of bits that the lists of one module share (`ModuleHooks::lists`), and which of them
/// one list keeps: `nonempty` while it holds hooks. A hooked call reads from this one word which
/// lists it runs, where it would read a size from each list's own cache line.
struct ListBits {
  std::atomic<std::uint32_t>* word = nullptr;
  std::uint32_t nonempty = 0;
};

/// An ordered list of hooks of one kind on one module (or the global list of that kind).
///
/// Copy-on-write: registration and removal (rare) copy the vector, edit the copy and swap it in;
/// dispatch takes a snapshot (one reference taken under a spin lock) and iterates it. A hook may
/// therefore remove itself or others while running, and registration is safe while autograd
/// threads run backward hooks. Most lists of a hooked module are empty: their snapshot is null
/// and costs one atomic load, no lock.
template <class Hook>
class HookList final : public HookRemover {
 public:
  struct Entry {
    std::uint64_t id;
    Hook hook;
  };
  using Entries = std::vector<Entry>;
  using Snapshot = SharedVector<Entry>;
  using Items = typename Snapshot::Items;  // what a snapshot holds

  /// `counter`, when given, tracks how many hooks this list holds (see `call_hooks_active`);
  /// `observer`, when given, hears of every change after the list's lock is released. `guard`,
  /// when given, is the lock that guards the list instead of its own: a module table passes its
  /// lock, so that a hooked call snapshots the module's lists under the one lock it takes to find
  /// them (see `snapshot_guarded`). `bits`, when given, is kept under that guard too.
  explicit HookList(std::atomic<std::int64_t>* counter = nullptr, HookObserver* observer = nullptr,
                    SpinLock* guard = nullptr, ListBits bits = {})
      : lists_(bits), guard_(guard ? guard : &lock_), counter_(counter), observer_(observer) {}
  HookList(const HookList&) = delete;
  HookList& operator=(const HookList&) = delete;
  ~HookList() override {
    hook_lists_generation.fetch_add(1, std::memory_order_release);
    const auto n = static_cast<std::int64_t>(entries_->size());
    if (counter_) counter_->fetch_sub(n);
    if (observer_ && n) observer_->hooks_changed(-n);
    tell_hook_lists_changed();
  }

  /// Appends the hook, or puts it first with `prepend` (Python's `move_to_end(last=False)`).
  /// `id` is a fresh one unless given (one hook stored in several lists shares its id).
  std::uint64_t add(Hook hook, bool prepend = false, std::uint64_t id = 0) {
    if (id == 0) id = next_hook_id.fetch_add(1);
    Snapshot old;  // dies after the locks: its hooks' destructors may edit this list again
    {
      std::lock_guard<std::mutex> writing(write_mutex_);
      Entries next;
      next.reserve(entries_->size() + 1);
      if (prepend) {
        next.push_back(Entry{id, std::move(hook)});
        next.insert(next.end(), entries_->begin(), entries_->end());
      } else {
        next.insert(next.end(), entries_->begin(), entries_->end());
        next.push_back(Entry{id, std::move(hook)});
      }
      old = publish(Snapshot::make(std::move(next)));
      if (counter_) counter_->fetch_add(1);
    }
    if (observer_) {
      observer_->hooks_changed(1);
      // A thread that took its snapshots between `publish` and the observer's count (the
      // filter of hooked modules) read the new generation and the module's filter slot still at
      // zero, and kept snapshots without this hook: a second bump makes them stale.
      hook_lists_generation.fetch_add(1, std::memory_order_release);
    }
    tell_hook_lists_changed();
    return id;
  }

  void remove(std::uint64_t id) noexcept override {
    Snapshot old;  // dies after the locks: its hooks' destructors may edit this list again
    {
      std::lock_guard<std::mutex> writing(write_mutex_);
      auto pos = std::find_if(entries_->begin(), entries_->end(),
                              [id](const Entry& e) { return e.id == id; });
      if (pos == entries_->end()) return;
      Entries next;
      next.reserve(entries_->size() - 1);
      next.insert(next.end(), entries_->begin(), pos);
      next.insert(next.end(), std::next(pos), entries_->end());
      old = publish(Snapshot::make(std::move(next)));
      if (counter_) counter_->fetch_sub(1);
    }
    if (observer_) observer_->hooks_changed(-1);
    tell_hook_lists_changed();
  }

  /// The hooks as they are now, in call order (null when there are none); later changes do
  /// not affect it.
  MODHOOKS_ALWAYS_INLINE Snapshot snapshot() const {
    if (empty()) return nullptr;
    guard_->lock();  // not a lock_guard, which the compiler may leave out of line: nothing throws
    Snapshot taken = entries_;
    guard_->unlock();
    return taken;
  }

  /// The same, for a caller that holds the list's guard.
  MODHOOKS_ALWAYS_INLINE Snapshot snapshot_guarded() const {
    if (empty()) return nullptr;
    return entries_;
  }

  /// Calls `f(hook)` for each hook of a snapshot, which it keeps alive while iterating (a
  /// range-for over `*snapshot()` would not: the temporary snapshot dies first).
  template <class F>
  void for_each(F&& f) const {
    const Snapshot hooks = snapshot();
    if (!hooks) return;
    for (const auto& entry : *hooks) f(entry.hook);
  }

  std::size_t size() const { return size_.load(std::memory_order_acquire); }
  bool empty() const { return size() == 0; }

 private:
  /// Swaps in the edited copy and returns the old one, which the editor keeps until it has let
  /// go of `write_mutex_` (its hooks' destructors may re-enter modhooks, this list included),
  /// unless a snapshot still holds it. The shared word of lists changes by one exclusive-or of
  /// this list's old and new bits, so the other lists' bits, which their editors may change
  /// meanwhile, are never rewritten.
  [[nodiscard]] Snapshot publish(Snapshot next) {
    const std::uint32_t bits = next->empty() ? 0 : lists_.nonempty;
    {
      std::lock_guard<SpinLock> lock(*guard_);
      entries_.swap(next);
      if (lists_.word) lists_.word->fetch_xor(bits_ ^ bits, std::memory_order_relaxed);
    }
    bits_ = bits;
    size_.store(entries_->size(), std::memory_order_release);
    hook_lists_generation.fetch_add(1, std::memory_order_release);
    return next;
  }

  // What a hooked call reads, first after the vtable pointer: one cache line with the word of
  // lists that precedes the forward list in `ModuleHooks`.
  Snapshot entries_ = Snapshot::make({});
  std::atomic<std::size_t> size_{0};
  ListBits lists_;
  std::uint32_t bits_ = 0;  // this list's bits in `lists_.word`, changed under `write_mutex_`
  std::mutex write_mutex_;  // one editor at a time, so that the copy is made outside `lock_`
  mutable SpinLock lock_;   // guards the pointer `entries_` between editors and snapshots,
  SpinLock* guard_;         // unless another lock does
  std::atomic<std::int64_t>* counter_;
  HookObserver* observer_;
};

/// A handle for a hook of `list`, a member of the object `owner` points to. The handle's weak
/// reference shares `owner`'s lifetime (shared_ptr aliasing), so it dies with the module's tables.
template <class Owner, class Hook>
RemovableHandle make_handle(const std::shared_ptr<Owner>& owner, HookList<Hook>& list,
                            std::uint64_t id) {
  return RemovableHandle(std::shared_ptr<HookRemover>(owner, &list), id);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
