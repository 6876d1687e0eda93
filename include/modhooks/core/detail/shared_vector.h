// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "modhooks/core/detail/inline.h"

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

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

}  // namespace detail
MODHOOKS_END_NAMESPACE
