// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/points/detail/point.h"
#include "modhooks/version.h"

// Who a hook point of an ExecuTorch program is, for the registration functions: a point kind
// (modhooks/points/detail/point.h). Nothing here needs ExecuTorch's headers.

MODHOOKS_BEGIN_NAMESPACE
namespace executorch {
class Point;
}  // namespace executorch

template <>
struct detail::KindTraits<const executorch::Point> : detail::PointKind {};

MODHOOKS_END_NAMESPACE
