// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// What the fake's opaque aclnn handles hold; shared by fake libnnopbase.so and libopapi.so.

#include <cstdint>
#include <vector>

#include "modhooks/device/detail/acl_types.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail::acl_own {

struct aclTensor {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  int64_t offset;
  aclDataType dtype;
  aclFormat format;
  std::vector<int64_t> storage_dims;
  void* data;
};

struct aclScalar {
  double value;
  aclDataType dtype;
};

/// One planned Muls call; consumed by its second phase, as in CANN.
struct aclOpExecutor {
  void* self;
  void* out;
  int64_t numel;
  aclDataType dtype;
  double factor;
};

}  // namespace device::detail::acl_own
MODHOOKS_END_NAMESPACE
