// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "modhooks/aoti/detail/identity.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace aoti {

/// \addtogroup api_aoti
/// @{

/// One hook point of an exported model: the boundary of one submodule, placed by
/// `modhooks.export.export` in Python and compiled into the package. Hooks registered on it
/// with the usual `register_forward_pre_hook` / `register_forward_hook` receive it where hooks
/// on a module receive the module. A `Model` owns its points; they live as long as it does.
///
/// **Example**:
/// \code
///   modhooks::aoti::Model net("net.pt2");
///   const modhooks::aoti::Point& p = net.point("layer2");
///   std::cout << p.name() << " is a " << p.type_name() << "\n";  // "layer2 is a Sequential"
/// \endcode
class Point {
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

  Point(const Point&) = delete;
  Point& operator=(const Point&) = delete;

  /// \cond INTERNAL
  Point(std::string name, std::string type_name, bool inputs, bool single, std::size_t index);
  std::size_t index() const noexcept { return index_; }
  /// \endcond

 private:
  friend const std::shared_ptr<modhooks::detail::PointHooks>& modhooks::detail::hooks_for(
      const Point&) noexcept;

  std::string name_;
  std::string type_name_;
  bool inputs_;
  bool single_;
  std::size_t index_;
  std::shared_ptr<modhooks::detail::PointHooks> hooks_;
};

/// @}

}  // namespace aoti
MODHOOKS_END_NAMESPACE
