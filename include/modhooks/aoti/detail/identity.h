// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/points/detail/point.h"
#include "modhooks/version.h"

// Who a hook point of an AOTInductor package is, for the registration functions: a point kind
// (modhooks/points/detail/point.h). Nothing here needs AOTInductor's headers.

MODHOOKS_BEGIN_NAMESPACE
namespace aoti {
class Point;
}  // namespace aoti

template <>
struct detail::KindTraits<const aoti::Point> : detail::PointKind {};

MODHOOKS_END_NAMESPACE
