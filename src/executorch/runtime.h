// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modhooks/points/detail/tensor_view.h"
#include "modhooks/version.h"

// What passes between ExecuTorch's side of the component (runtime.cpp, the one unit with
// ExecuTorch's headers) and libtorch's (the rest): the two cannot share a unit, since
// ExecuTorch's copies of c10's headers redefine libtorch's. Plain memory, sizes and dtype
// numbers only; ExecuTorch's ScalarType numbers are c10's.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A loaded ExecuTorch program and its method `forward`, with modhooks' point kernel registered.
class EtRuntime {
 public:
  /// Loads the program at `path`; FormatError `executorch.program.unloadable` where ExecuTorch
  /// cannot load it or its `forward`.
  explicit EtRuntime(const std::string& path);
  ~EtRuntime();
  EtRuntime(const EtRuntime&) = delete;
  EtRuntime& operator=(const EtRuntime&) = delete;

  /// The string the program's constant method `method` returns; none where it has no such
  /// method (a program exported without modhooks). FormatError `bad_id` where it returns
  /// something else.
  std::optional<std::string> string_constant(const char* method, const char* bad_id);

  /// The dtypes of `forward`'s inputs (ScalarType numbers; -1 for an input that is no tensor).
  const std::vector<int>& input_dtypes() const noexcept;

  /// Runs `forward` on `inputs`, one at a time. Returns "" and fills `outputs` with views of the
  /// program's memory (valid until the next run), or ExecuTorch's error, named.
  std::string run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Fires point `name` (its input point where `inputs`) on `outs`, the point's tensors in the
/// program's memory, on this thread's run (src/executorch/program.cpp). Called by the point's
/// kernel inside ExecuTorch, so it never throws: false where the run must end, its error
/// recorded for `Program::run`.
bool fire_point(std::string_view name, bool inputs, const TensorView* outs, std::size_t n) noexcept;

}  // namespace detail
MODHOOKS_END_NAMESPACE
