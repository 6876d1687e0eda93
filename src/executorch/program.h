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

#include "modhooks/dispatch/detail/global.h"
#include "modhooks/executorch/point.h"
#include "modhooks/points/detail/program.h"
#include "modhooks/version.h"
#include "runtime.h"

// A loaded program: ExecuTorch's side (`EtRuntime`), the checks before it runs, and the table of
// points that modhooks.export.to_executorch wrote into it.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class EtProgram : public CompiledProgram<EtProgram, executorch::Point> {
 public:
  /// What `Points` needs of a program (modhooks/points/detail/firing.h).
  static const ProgramWords words;  // defined beside the errors that use it

  /// Loads the program at `path`; throws `executorch.program.*` as docs/errors.md lists them.
  explicit EtProgram(std::string path);

  /// `executorch.program.reentrant_run`: a hook ran this program while it runs on this thread.
  [[noreturn]] void refuse_reentrant_run() const;
  /// One run at a time: an ExecuTorch method is not safe to run from two threads at once.
  static constexpr std::size_t runners = 1;
  std::mutex running;
  EtRuntime runtime;
};

/// The global lists of this kind, instantiated in src/executorch/program.cpp.
extern template struct GlobalHooks<const executorch::Point>;

}  // namespace detail
MODHOOKS_END_NAMESPACE
