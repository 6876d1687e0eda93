// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The ACL prototypes modhooks calls, as function pointer types: modhooks never links ACL, it
/// resolves these with dlsym (src/device/acl_runtime.cpp), so a wrong prototype would be a silent
/// ABI break. Each type is therefore written out once here, and tests/acl_signature_check.cpp
/// compiles this header against CANN's own headers (define MODHOOKS_ACL_REAL_HEADERS after
/// including <acl/acl.h>) and static_asserts `decltype(&aclX) == XFn` for every one of them
/// that those headers declare.

#include "modhooks/device/detail/acl_types.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail::acl {

#ifdef MODHOOKS_ACL_REAL_HEADERS
// Checking mode: spell the prototypes with CANN's own types from <acl/acl.h>.
using ::aclDataType;
using ::aclError;
using ::aclFormat;
using ::aclrtMemcpyKind;
using ::aclrtMemMallocPolicy;
using ::aclrtStream;
#else
using acl_own::aclDataType;
using acl_own::aclError;
using acl_own::aclFormat;
using acl_own::aclrtMemcpyKind;
using acl_own::aclrtMemMallocPolicy;
using acl_own::aclrtStream;
#endif
// aclnn types: the torch-npu wheel does not ship aclnn/acl_meta.h, so these are always ours.
using acl_own::aclnnStatus;
using acl_own::aclOpExecutor;
using acl_own::aclScalar;
using acl_own::aclTensor;

// libascendcl.so (acl/acl.h, acl/acl_rt.h)
using InitFn = aclError (*)(const char* configPath);
using GetRecentErrMsgFn = const char* (*)();
using SetDeviceFn = aclError (*)(int32_t deviceId);
using GetDeviceFn = aclError (*)(int32_t* deviceId);
using CreateStreamFn = aclError (*)(aclrtStream* stream);
using SynchronizeStreamFn = aclError (*)(aclrtStream stream);
using MallocFn = aclError (*)(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
using FreeFn = aclError (*)(void* devPtr);
using MemcpyAsyncFn = aclError (*)(void* dst, size_t destMax, const void* src, size_t count,
                                   aclrtMemcpyKind kind, aclrtStream stream);
using MemsetAsyncFn = aclError (*)(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                   aclrtStream stream);

// libnnopbase.so (aclnn/acl_meta.h). Strides and offset are in elements.
using CreateTensorFn = aclTensor* (*)(const int64_t* viewDims, uint64_t viewDimsNum,
                                      aclDataType dataType, const int64_t* stride, int64_t offset,
                                      aclFormat format, const int64_t* storageDims,
                                      uint64_t storageDimsNum, void* tensorData);
using DestroyTensorFn = aclnnStatus (*)(const aclTensor* tensor);
using CreateScalarFn = aclScalar* (*)(void* value, aclDataType dataType);
using DestroyScalarFn = aclnnStatus (*)(const aclScalar* scalar);
/// Newer CANN only; frees an executor whose second phase never ran.
using DestroyExecutorFn = aclnnStatus (*)(aclOpExecutor* executor);

// libopapi.so (aclnnop/aclnn_mul.h): out = self * other, two-phase.
using MulsGetWorkspaceSizeFn = aclnnStatus (*)(const aclTensor* self, const aclScalar* other,
                                               aclTensor* out, uint64_t* workspaceSize,
                                               aclOpExecutor** executor);
using MulsFn = aclnnStatus (*)(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                               aclrtStream stream);

}  // namespace device::detail::acl
MODHOOKS_END_NAMESPACE
