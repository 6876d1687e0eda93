// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/points/detail/firing.h"
#include "modhooks/version.h"
#include "package.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// One `Model::run` on this thread: while it lives, the hook-point operators' kernels serve
/// the package's points (`Points`).
using RunScope = Points<AotiModel>::RunScope;

}  // namespace detail
MODHOOKS_END_NAMESPACE
