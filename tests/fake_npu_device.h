// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// A test-only libtorch device named "npu" (PrivateUse1, as torch_npu registers it) whose memory
/// comes from the fake ACL runtime, so a real at::Tensor on npu:0 takes modhooks' NPU path end
/// to end. Only a few kernels are native (empty, copies, views); every other op runs on the CPU
/// through libtorch's CPU fallback, which is all a test needs to build and backpropagate through
/// small graphs. Needs libtorch 2.4+ (named PrivateUse1, the current Allocator interface).

#include <torch/version.h>

#include <string>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MODHOOKS_FAKE_NPU 1
#else
#define MODHOOKS_FAKE_NPU 0
#endif

namespace fake_npu {

/// Names PrivateUse1 "npu" (once per process). Memory is taken lazily, through modhooks' own
/// ACL runtime, so set_acl_library_path must point at the fakes before the first tensor.
/// Returns false, with the reason, on a libtorch without the needed extension points.
bool enable(std::string* why_not);

}  // namespace fake_npu
