// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <memory>
#include <type_traits>

#include "modhooks/core/detail/kinds.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

// Who a hook point of an ExecuTorch program is, for the registration functions: the point
// itself, whose hook tables its program made when it loaded; and what kind of module it is.
// Nothing here needs ExecuTorch's headers.

MODHOOKS_BEGIN_NAMESPACE
namespace executorch {
class Point;
}  // namespace executorch

namespace detail {

/// A program runs forward only, with no module state of its own; a global hook reaches its
/// points only when written for them.
template <>
struct KindTraits<const executorch::Point> {
  static constexpr bool backward = false;
  static constexpr bool state = false;
  static constexpr bool generic_hooks = false;
};

using ExecutorchPointHooks = ModuleHooks<const executorch::Point>;

/// The global tables of this kind, instantiated in the library (src/executorch/points.cpp).
extern template struct GlobalHooksActive<const executorch::Point>;
extern template const std::shared_ptr<ModuleHooks<const executorch::Point>>&
global_hooks<const executorch::Point>();

/// A point is named by reference only, as `Program::point` hands it out (see aoti's identity).
template <class P,
          std::enable_if_t<std::is_same_v<std::remove_cv_t<P>, executorch::Point>, int> = 0>
const executorch::Point& module_ref(P& point) noexcept {
  return point;
}

/// The hook tables of `point`, made with it.
const std::shared_ptr<ExecutorchPointHooks>& hooks_for(const executorch::Point& point) noexcept;

}  // namespace detail
MODHOOKS_END_NAMESPACE
