// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// modhooks' own copy of the few ACL types it passes across the C ABI. They live in a namespace,
/// not the global one, so a program that also includes CANN's headers sees no clash; the
/// signature check (tests/acl_signature_check.cpp) proves every value and underlying type equal
/// to the real headers'.

#include <cstddef>
#include <cstdint>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail::acl_own {

// acl/acl_base.h
typedef int aclError;
typedef void* aclrtStream;

/// Values as in acl/acl_base.h. The -1 member keeps the underlying type signed, as there.
typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_INT64 = 9,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_BF16 = 27,
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_NDHWC = 27,
  ACL_FORMAT_FRACTAL_NZ = 29,
  ACL_FORMAT_NCDHW = 30,
} aclFormat;

// acl/acl_rt.h
typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
} aclrtMemcpyKind;

/// All members non-negative and one of 0x100000, as in acl_rt.h: same underlying type.
typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
  ACL_MEM_MALLOC_HUGE_ONLY = 1,
  ACL_MEM_MALLOC_NORMAL_ONLY = 2,
  ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

// aclnn/acl_meta.h (not shipped in the torch-npu wheel, so not checkable there).
typedef int32_t aclnnStatus;
struct aclTensor;
struct aclScalar;
struct aclOpExecutor;

/// Error codes modhooks reacts to or tests for (acl_base.h, error_codes/rt_error_codes.h). Named
/// differently from CANN because the runtime codes are macros there.
constexpr aclError kSuccess = 0;
constexpr aclError kErrorUninitialize = 100001;
constexpr aclError kErrorRepeatInitialize = 100002;
constexpr aclError kErrorBadAlloc = 200000;
constexpr aclError kErrorRtContextNull = 107002;
constexpr aclError kErrorRtInternal = 507000;

}  // namespace device::detail::acl_own
MODHOOKS_END_NAMESPACE
