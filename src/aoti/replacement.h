// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <vector>

#include "modhooks/aoti/point.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The tensors of a replacement `value` for what the compiled graph holds at `point`,
/// `expected`: each of the same sizes, dtype and device, since the kernels after the point were
/// compiled for those. `what` names it in errors ("args", "output"); `single`: the graph holds
/// one tensor there, not a tuple.
std::vector<at::Tensor> replacement(const aoti::Point& point, const char* what,
                                    const c10::IValue& value, at::TensorList expected, bool single);

}  // namespace detail
MODHOOKS_END_NAMESPACE
