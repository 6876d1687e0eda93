// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace modhooks {
namespace detail {

/// What a handle points at: a table that can drop one of its hooks by id. Handles keep only a
/// weak reference to it, as Python's `RemovableHandle` keeps a weakref to the hook dict.
class HookTableBase {
 public:
  virtual ~HookTableBase() = default;
  virtual void remove(std::uint64_t id) noexcept = 0;
};

/// One counter for every hook of the process (forward, backward, state-dict, global), like
/// `RemovableHandle.next_id`: ids never repeat, so side tables keyed by id cannot collide.
/// Like all of modhooks' process-wide state it is defined once, inside the library
/// (src/core/process_state.cpp), not in a header: every shared object linked against a shared
/// libmodhooks counts with the same one.
extern std::atomic<std::uint64_t> next_hook_id;

}  // namespace detail

/// Removes the hook it was returned for (Python's `torch.utils.hooks.RemovableHandle`).
///
/// Copyable and cheap. It holds no reference to the module or the hook, only a weak reference
/// to the table the hook sits in, so it may outlive both.
class RemovableHandle {
 public:
  /// Refers to nothing; `remove()` is a no-op.
  RemovableHandle() noexcept = default;
  RemovableHandle(std::weak_ptr<detail::HookTableBase> table, std::uint64_t id) noexcept
      : table_(std::move(table)), id_(id) {}

  /// Unique across every hook of the process and increasing; 0 for an empty handle.
  std::uint64_t id() const noexcept { return id_; }

  /// Idempotent. A no-op once the hook or its module is gone. Safe from inside a running hook:
  /// dispatch iterates a snapshot, so the hook being run stays alive until it returns.
  void remove() noexcept {
    if (auto table = table_.lock()) table->remove(id_);
  }

 private:
  std::weak_ptr<detail::HookTableBase> table_;
  std::uint64_t id_ = 0;
};

/// Python's `with handle:`: removes the hook when the scope ends. Move-only.
class ScopedHandle {
 public:
  explicit ScopedHandle(RemovableHandle handle) noexcept : handle_(std::move(handle)) {}
  ScopedHandle(ScopedHandle&& other) noexcept : handle_(other.release()) {}
  ScopedHandle& operator=(ScopedHandle&& other) noexcept {
    if (this != &other) {
      handle_.remove();
      handle_ = other.release();
    }
    return *this;
  }
  ScopedHandle(const ScopedHandle&) = delete;
  ScopedHandle& operator=(const ScopedHandle&) = delete;
  ~ScopedHandle() { handle_.remove(); }

  /// Gives the handle back without removing the hook.
  RemovableHandle release() noexcept { return std::exchange(handle_, RemovableHandle()); }
  const RemovableHandle& get() const noexcept { return handle_; }

 private:
  RemovableHandle handle_;
};

}  // namespace modhooks
