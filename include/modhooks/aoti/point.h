// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/aoti/detail/identity.h"
#include "modhooks/points/detail/point.h"
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
class Point : public modhooks::detail::PointBase<Point> {
 public:
  using PointBase::PointBase;
};

/// @}

}  // namespace aoti
MODHOOKS_END_NAMESPACE
