// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/executorch/detail/identity.h"
#include "modhooks/points/detail/point.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace executorch {

/// \addtogroup api_executorch
/// @{

/// One hook point of an ExecuTorch program: the boundary of one submodule, placed by
/// `modhooks.export.export(..., backend="executorch")` in Python and written into the `.pte` by
/// `modhooks.export.to_executorch`. Hooks registered on it with the usual
/// `register_forward_pre_hook` / `register_forward_hook` receive it where hooks on a module
/// receive the module. A `Program` owns its points; they live as long as it does.
class Point : public modhooks::detail::PointBase<Point> {
 public:
  using PointBase::PointBase;
};

/// @}

}  // namespace executorch
MODHOOKS_END_NAMESPACE
