// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The NPU backend's operations on raw device memory, below at::Tensor: what the backend
/// extracts from an NPU tensor, and an entry that tests (and libtorch 1.13, which has no named
/// PrivateUse1 device) can drive with plain aclrtMalloc'd memory.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail {

/// A dense, contiguous block of `sizes` elements of `dtype` at device address `data`.
struct NpuBuffer {
  void* data;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
  int32_t device;

  int64_t numel() const;
  size_t nbytes() const;
};

/// Sets every byte of `dst` to zero (aclrtMemsetAsync), then synchronises the stream.
void npu_fill_zero(const NpuBuffer& dst);

/// dst = src * factor (aclnnMuls into `dst`, which must not overlap `src`); synchronises the
/// stream before the workspace is freed.
void npu_mul(const NpuBuffer& src, double factor, const NpuBuffer& dst);

/// Copies `src` into `host` (src.nbytes() bytes) on the stream and waits for it.
void npu_copy_to_host(const NpuBuffer& src, void* host);

}  // namespace device::detail
MODHOOKS_END_NAMESPACE
