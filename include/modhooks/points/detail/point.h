// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "modhooks/core/detail/kinds.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

// What every hook point of a compiled program is, whatever program holds it (an AOTInductor
// package, an ExecuTorch program): its identity for the registration functions and its hook
// lists. A kind of compiled program declares its point class `P` in its identity header as
//   template <> struct KindTraits<const P> : PointKind {};
// and derives `P` from `PointBase<P>`; `module_ref` and `hooks_for` below then serve it.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The traits of every point kind: a compiled program runs forward only, with no autograd graph
/// and no module state of its own, and a global hook reaches its points only when written for
/// them (never an `auto&` hook written for modules).
struct PointKind {
  static constexpr bool backward = false;
  static constexpr bool state = false;
  static constexpr bool generic_hooks = false;
};

/// Whether `P` is the point class of a compiled-program kind (its `KindTraits` say so).
template <class P>
inline constexpr bool is_point_kind = std::is_base_of_v<PointKind, KindTraits<const P>>;

/// A point is named by reference only, as its program hands it out. A template that takes
/// exactly a point: a plain `const P&` overload would make overload resolution try every other
/// spelling's conversions to the (maybe incomplete) point type.
template <class P, std::enable_if_t<is_point_kind<std::remove_cv_t<P>>, int> = 0>
const std::remove_cv_t<P>& module_ref(P& point) noexcept {
  return point;
}

/// The hook lists of `point`, made with it.
template <class P, std::enable_if_t<is_point_kind<P>, int> = 0>
const std::shared_ptr<ModuleHooks<const P>>& hooks_for(const P& point) noexcept {
  return point.hooks();
}

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

/// A point of kind `Self` with its hook lists, which its program makes when it loads.
template <class Self>
class PointBase : public PointInfo {
 public:
  /// \cond INTERNAL
  PointBase(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
      : PointInfo(std::move(name), std::move(type_name), inputs, single, index),
        hooks_(std::make_shared<ModuleHooks<const Self>>()) {}
  const std::shared_ptr<ModuleHooks<const Self>>& hooks() const noexcept { return hooks_; }
  /// \endcond

 private:
  std::shared_ptr<ModuleHooks<const Self>> hooks_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
