// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <memory>
#include <type_traits>

#include "modhooks/core/detail/kinds.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

// Who a hook point is, for the registration functions: the point itself, whose hook tables its
// model made when it loaded the package; and what kind of module it is. Nothing here needs
// AOTInductor's headers.

MODHOOKS_BEGIN_NAMESPACE
namespace aoti {
class Point;
}  // namespace aoti

namespace detail {

/// A package runs forward only: no autograd graph, no module state of its own; and a global
/// hook reaches points only when written for them.
template <>
struct KindTraits<const aoti::Point> {
  static constexpr bool backward = false;
  static constexpr bool state = false;
  static constexpr bool generic_hooks = false;
};

using PointHooks = ModuleHooks<const aoti::Point>;

/// The global tables of this kind, instantiated in the library (src/aoti/package.cpp).
extern template struct GlobalHooksActive<const aoti::Point>;
extern template const std::shared_ptr<ModuleHooks<const aoti::Point>>&
global_hooks<const aoti::Point>();

/// A point is named by reference only: `Model::point` hands out the model's own. A template
/// that takes exactly a point: a plain `const aoti::Point&` overload would make overload
/// resolution try every other spelling's conversions to the (incomplete) point type.
template <class P, std::enable_if_t<std::is_same_v<std::remove_cv_t<P>, aoti::Point>, int> = 0>
const aoti::Point& module_ref(P& point) noexcept {
  return point;
}

/// The hook tables of `point`, made with it (src/aoti/model.cpp).
const std::shared_ptr<PointHooks>& hooks_for(const aoti::Point& point) noexcept;

}  // namespace detail
MODHOOKS_END_NAMESPACE
