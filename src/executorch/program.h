// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modhooks/executorch/point.h"
#include "modhooks/points/detail/replacement.h"
#include "modhooks/version.h"
#include "runtime.h"

// A loaded program: ExecuTorch's side (`EtRuntime`), the checks before it runs, and the table of
// points that modhooks.export.to_executorch wrote into it.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class EtProgram {
 public:
  /// What `Points` needs of a program (modhooks/points/detail/firing.h).
  using PointType = executorch::Point;
  static constexpr PointErrorIds ids{"executorch.point.keep_failed",
                                     "executorch.hook.bad_replacement",
                                     "executorch.hook.replacement_mismatch"};

  /// Loads the program at `path`; throws `executorch.program.*` as docs/errors.md lists them.
  explicit EtProgram(std::string path);

  const executorch::Point* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  /// `executorch.program.reentrant_run`: a hook ran this program while it runs on this thread.
  [[noreturn]] void refuse_reentrant_run() const;
  /// `executorch.program.run_failed`: the run failed with `e`, which no hook threw.
  [[noreturn]] void fail_run(const std::exception& e) const;

  std::string path;
  /// One run at a time: an ExecuTorch method is not safe to run from two threads at once.
  static constexpr std::size_t runners = 1;
  std::mutex running;
  EtRuntime runtime;
  std::vector<std::unique_ptr<executorch::Point>> points;
  std::vector<std::string> names;

 private:
  std::unordered_map<std::string_view, const executorch::Point*> by_name_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
