// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include "python_json.h"

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

/// Sets `record`'s "Max", "Min", "Mean" and "Norm" as msprobe takes them: `torch.max`,
/// `torch.min`, `torch.mean` and `torch.norm` of the tensor in its own dtype on its own device,
/// by msprobe's rules per dtype (null where msprobe writes None). The values are torch's to the
/// bit; one small copy reaches the host.
void add_statistics(const at::Tensor& tensor, Json& record);

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
