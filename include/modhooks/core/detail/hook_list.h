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
#include "modhooks/core/detail/spin_lock.h"
#include "modhooks/core/handle.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Hooks that take `call` off its fast path, counted over every live table of the process.
/// `call` reads it with one relaxed load before doing anything else; zero means "no hooks
/// anywhere", and the module's `forward` runs as if modhooks were not there. Defined in the
/// library (src/core/process_state.cpp).
extern std::atomic<std::int64_t> call_hooks_active;

/// Bumped after every change of a hook list (a hook added or removed, a list destroyed): a
/// snapshot that a thread keeps between calls (nn's dispatch cache) is current while the
/// generation it was taken at still is. Defined in the library (src/core/process_state.cpp).
extern std::atomic<std::uint64_t> hook_lists_generation;

/// Run on the thread that changed a hook list, once the change is made and the list's locks are
/// released (null until a kind that keeps snapshots between calls sets it): nn's dispatch cache
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

/// An immutable array shared by reference count: what a `HookList` publishes and what a call
/// snapshots. It does `std::shared_ptr<const std::vector<T>>`'s job in one allocation, aligned to
/// a cache line, with the items right after the count and the size: a hooked call that iterates a
/// list of one or two hooks reads one line, where the vector's own allocation was a second one to
/// fetch again after a forward that evicted it. The count's increment and decrement are inline,
/// where libstdc++'s shared_ptr calls out of line for both.
template <class T>
class SharedVector {
  static_assert(std::is_nothrow_move_constructible_v<T>, "items move into the block");

 public:
  /// The shared items, in order: a range of `const T`.
  class Items {
   public:
    const T* begin() const noexcept { return data(); }
    const T* end() const noexcept { return data() + size_; }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const T& operator[](std::size_t i) const noexcept { return data()[i]; }
    const T& front() const noexcept { return *data(); }

   private:
    friend class SharedVector;
    explicit Items(std::size_t size) noexcept : size_(size) {}
    const T* data() const noexcept {
      return reinterpret_cast<const T*>(reinterpret_cast<const char*>(this) + kOffset);
    }
    T* data() noexcept { return reinterpret_cast<T*>(reinterpret_cast<char*>(this) + kOffset); }
    std::atomic<std::int64_t> refs_{1};
    std::size_t size_;
  };

  SharedVector() noexcept = default;
  SharedVector(std::nullptr_t) noexcept {}  // implicit, as shared_ptr's: `return nullptr;`
  static SharedVector make(std::vector<T> values) {
    void* memory = ::operator new (kOffset + values.size() * sizeof(T), std::align_val_t{kAlign});
    auto* items = new (memory) Items(values.size());
    T* data = items->data();
    for (std::size_t i = 0; i < values.size(); ++i) new (data + i) T(std::move(values[i]));
    return SharedVector(items);
  }
  SharedVector(const SharedVector& other) noexcept : items_(other.items_) {
    if (items_) items_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  SharedVector(SharedVector&& other) noexcept : items_(std::exchange(other.items_, nullptr)) {}
  SharedVector& operator=(SharedVector other) noexcept {
    swap(other);
    return *this;
  }
  MODHOOKS_ALWAYS_INLINE ~SharedVector() {
    if (items_ && items_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(items_);
  }
  void swap(SharedVector& other) noexcept { std::swap(items_, other.items_); }

  explicit operator bool() const noexcept { return items_ != nullptr; }
  const Items& operator*() const noexcept { return *items_; }
  const Items* operator->() const noexcept { return items_; }

 private:
  static constexpr std::size_t kAlign = 64;
  /// Where the items start: after the count and the size, at `T`'s alignment.
  static constexpr std::size_t kOffset = (sizeof(Items) + alignof(T) - 1) / alignof(T) * alignof(T);

  explicit SharedVector(Items* items) noexcept : items_(items) {}
  /// The last reference gone: the hooks' destructors run, out of the hooked call's way.
  MODHOOKS_COLD static void destroy(Items* items) noexcept {
    T* data = items->data();
    for (std::size_t i = 0; i < items->size_; ++i) data[i].~T();
    items->~Items();
    ::operator delete (static_cast<void*>(items), std::align_val_t{kAlign});
  }

  Items* items_ = nullptr;
};

/// A word of bits that the lists of one module's tables share (`ModuleHooks::kinds`), and which
/// of them one list keeps: `nonempty` while it holds hooks. A hooked call reads from this one
/// word what kinds of hooks it runs, where it read a size from each list's own cache line.
struct KindBits {
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
class HookList final : public HookTableBase {
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
  /// them (see `snapshot_guarded`). `kinds`, when given, is kept under that guard too.
  explicit HookList(std::atomic<std::int64_t>* counter = nullptr, HookObserver* observer = nullptr,
                    SpinLock* guard = nullptr, KindBits kinds = {})
      : kinds_(kinds), guard_(guard ? guard : &lock_), counter_(counter), observer_(observer) {}
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
    if (observer_) observer_->hooks_changed(1);
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
  Snapshot snapshot() const {
    if (empty()) return nullptr;
    std::lock_guard<SpinLock> lock(*guard_);
    return entries_;
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
  /// unless a snapshot still holds it. The shared word of kinds changes by one exclusive-or of
  /// this list's old and new bits, so the other lists' bits, which their editors may change
  /// meanwhile, are never rewritten.
  [[nodiscard]] Snapshot publish(Snapshot next) {
    const std::uint32_t bits = next->empty() ? 0 : kinds_.nonempty;
    {
      std::lock_guard<SpinLock> lock(*guard_);
      entries_.swap(next);
      if (kinds_.word) kinds_.word->fetch_xor(bits_ ^ bits, std::memory_order_relaxed);
    }
    bits_ = bits;
    size_.store(entries_->size(), std::memory_order_release);
    hook_lists_generation.fetch_add(1, std::memory_order_release);
    return next;
  }

  // What a hooked call reads, first after the vtable pointer: one cache line with the word of
  // kinds that precedes the forward list in `ModuleHooks`.
  Snapshot entries_ = Snapshot::make({});
  std::atomic<std::size_t> size_{0};
  KindBits kinds_;
  std::uint32_t bits_ = 0;  // this list's bits in `kinds_.word`, changed under `write_mutex_`
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
  return RemovableHandle(std::shared_ptr<HookTableBase>(owner, &list), id);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
