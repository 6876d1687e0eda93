// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <functional>
#include <utility>

#include "modhooks/version.h"

// The tests' seam of `load_state_dict`'s all-or-nothing promise: faults injected into its copies.
// Private to the library, never installed: the tests that inject faults compile against src/
// (tests/CMakeLists.txt), and what the library reads of it stays one thread-local per load.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Where a load's copy may be made to fail by a `CopyFaultGuard`: in the checks that run
/// before the first write (what the checks exist to catch: the load then fails with nothing
/// written), or in the writes themselves (what is left once the checks passed: a device or a file
/// failing under the copy).
enum class CopyStage { kCheck, kWrite };

/// The test seam of the all-or-nothing promise: while a guard lives on a thread, every
/// `load_state_dict` that starts on that thread calls `fault(i)` at `stage` of its i-th copy (in
/// the order of the model's tensors), and what it throws fails that copy. A load reads the seam
/// once, when it starts; without a guard its copies test nothing.
class CopyFaultGuard {
 public:
  explicit CopyFaultGuard(std::function<void(std::size_t)> fault,
                          CopyStage stage = CopyStage::kCheck)
      : fault_(std::move(fault)), stage_(stage), outer_(std::exchange(active_, this)) {}
  ~CopyFaultGuard() { active_ = outer_; }
  CopyFaultGuard(const CopyFaultGuard&) = delete;
  CopyFaultGuard& operator=(const CopyFaultGuard&) = delete;

  /// The innermost guard on this thread, or null.
  static const CopyFaultGuard* active() noexcept { return active_; }

  /// Throws what the fault throws when `stage` is this guard's.
  void at(CopyStage stage, std::size_t i) const {
    if (stage == stage_) fault_(i);
  }

 private:
  std::function<void(std::size_t)> fault_;
  CopyStage stage_;
  const CopyFaultGuard* outer_;
  static inline thread_local const CopyFaultGuard* active_ = nullptr;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
