// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// What a handle points at: a table that can drop one of its hooks by id. Handles keep only a
/// weak reference to it, as Python's `RemovableHandle` keeps a weakref to the hook dict.
class HookRemover {
 public:
  virtual ~HookRemover() = default;
  virtual void remove(std::uint64_t id) noexcept = 0;
};

/// One counter for every hook of the process (forward, backward, state-dict, global), like
/// `RemovableHandle.next_id`: ids never repeat, so side tables keyed by id cannot collide.
/// Like all of modhooks' process-wide state it is defined once, inside the library
/// (src/core/process_state.cpp), not in a header: every shared object linked against a shared
/// libmodhooks counts with the same one.
extern std::atomic<std::uint64_t> next_hook_id;

}  // namespace detail

/// \addtogroup api_core
/// @{

/// Removes the hook it was returned for (Python's `torch.utils.hooks.RemovableHandle`).
///
/// Copyable and cheap. It holds no reference to the module or the hook, only a weak reference
/// to the table the hook sits in, so it may outlive both.
///
/// **Example**:
/// \code
///   modhooks::RemovableHandle h = modhooks::register_forward_hook(fc, hook);
///   modhooks::call(fc, x);  // fires the hook
///   h.remove();
///   modhooks::call(fc, x);  // does not
/// \endcode
class RemovableHandle {
 public:
  /// Refers to nothing; `remove()` is a no-op. \see \ref api_core
  RemovableHandle() noexcept = default;
  /// \cond INTERNAL
  /// The handle of hook `id` in `table`, as the registration functions make it.
  RemovableHandle(std::weak_ptr<detail::HookRemover> table, std::uint64_t id) noexcept
      : table_(std::move(table)), id_(id) {}
  /// \endcond

  /// Unique across every hook of the process and increasing; 0 for an empty handle.
  ///
  /// **Example**:
  /// \code
  ///   std::uint64_t id = modhooks::register_forward_hook(fc, hook).id();
  /// \endcode
  std::uint64_t id() const noexcept { return id_; }

  /// Idempotent. A no-op once the hook or its module is gone. Safe from inside a running hook:
  /// dispatch iterates a snapshot, so the hook being run stays alive until it returns.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::RemovableHandle once;
  ///   once = modhooks::register_forward_hook(fc, [&](auto&, auto&, auto&) { once.remove(); });
  /// \endcode
  void remove() noexcept {
    if (auto table = table_.lock()) table->remove(id_);
  }

 private:
  std::weak_ptr<detail::HookRemover> table_;
  std::uint64_t id_ = 0;
};

/// Python's `with handle:`: removes the hook when the scope ends. Move-only.
///
/// **Example**:
/// \code
///   {
///     modhooks::ScopedHandle scoped(modhooks::register_forward_hook(fc, hook));
///     modhooks::call(fc, x);  // fires the hook
///   }                         // removed here
///   std::vector<modhooks::ScopedHandle> handles;  // removed when the vector goes
///   handles.emplace_back(modhooks::register_forward_hook(fc, hook));
/// \endcode
class ScopedHandle {
 public:
  /// Takes `handle`'s hook, to remove it when this object goes. \see \ref api_core
  explicit ScopedHandle(RemovableHandle handle) noexcept : handle_(std::move(handle)) {}
  /// Takes `other`'s hook; `other` holds none after. \see \ref api_core
  ScopedHandle(ScopedHandle&& other) noexcept : handle_(other.release()) {}
  /// Removes the hook held, then takes `other`'s. \see \ref api_core
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

  /// Gives the handle back without removing the hook. \see \ref api_core
  RemovableHandle release() noexcept { return std::exchange(handle_, RemovableHandle()); }
  /// The handle held (empty after `release`). \see \ref api_core
  const RemovableHandle& get() const noexcept { return handle_; }

 private:
  RemovableHandle handle_;
};

/// @}

MODHOOKS_END_NAMESPACE
