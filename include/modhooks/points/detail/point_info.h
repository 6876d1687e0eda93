// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// What every hook point of a compiled program is (`aoti::Point`, `executorch::Point`): the
/// boundary of one submodule, as `modhooks.export` wrote it into the point table.
class PointInfo {
 public:
  /// The module's path, as Python's `named_modules()` names it ("layer1.0").
  const std::string& name() const noexcept { return name_; }
  /// The module's Python class name ("BasicBlock").
  const std::string& type_name() const noexcept { return type_name_; }
  /// Whether the module's inputs were exported as a point too: pre-hooks run only then, and
  /// forward hooks see `args` only then (else an empty vector).
  bool has_inputs() const noexcept { return inputs_; }
  /// Whether the module returned one tensor (forward hooks see a tensor) rather than several
  /// (a tuple of them, in the order `torch.utils._pytree` flattens the output).
  bool single_output() const noexcept { return single_; }

  PointInfo(const PointInfo&) = delete;
  PointInfo& operator=(const PointInfo&) = delete;

  /// \cond INTERNAL
  std::size_t index() const noexcept { return index_; }
  /// \endcond

 protected:
  PointInfo(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
      : name_(std::move(name)),
        type_name_(std::move(type_name)),
        inputs_(inputs),
        single_(single),
        index_(index) {}
  ~PointInfo() = default;

 private:
  std::string name_;
  std::string type_name_;
  bool inputs_;
  bool single_;
  std::size_t index_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
