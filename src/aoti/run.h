// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <exception>
#include <memory>

#include "modhooks/version.h"
#include "package.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

struct Run;

/// One `Model::run` on this thread: while it lives, the hook-point operators' kernels serve
/// `model`'s points. Throws `aoti.model.reentrant_run` where every runner of `model` already
/// serves a run on this thread (a hook running its own model), which would wait forever.
class RunScope {
 public:
  explicit RunScope(AotiModel& model);
  ~RunScope();
  RunScope(const RunScope&) = delete;
  RunScope& operator=(const RunScope&) = delete;

  /// The package's run threw `e`: the always-call forward hooks of the points it had entered and
  /// not left run, innermost first, as Python's `_call_impl` of each enclosing module runs them;
  /// then what a hook threw is rethrown as itself, anything else as `aoti.model.run_failed`.
  [[noreturn]] void fail(const std::exception& e);

 private:
  std::unique_ptr<Run> run_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
