// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

/// Compile-time proof that the ACL prototypes modhooks calls through dlsym match CANN's own
/// declarations. Built only when MODHOOKS_ACL_HEADERS_DIR names an include dir with acl/acl.h
/// (scripts/fetch-acl-headers.sh gets the one shipped in the torch-npu wheel); compiling is the
/// test.
///
/// What the torch-npu wheel ships, and therefore what is checked: acl/acl.h, acl/acl_base.h,
/// acl/acl_rt.h (runtime calls, aclError, aclrtStream, aclDataType, aclFormat, aclrtMemcpyKind,
/// aclrtMemMallocPolicy). It does not ship aclnn/acl_meta.h nor aclnnop/aclnn_mul.h, so the
/// aclnn prototypes (aclCreateTensor, aclCreateScalar, aclDestroy*, aclnnMuls*) are checked only
/// when the directory has them, i.e. against a full CANN install.

#include <acl/acl.h>

#include <type_traits>

#define MODHOOKS_ACL_REAL_HEADERS
#include "modhooks/device/detail/acl_api.h"

namespace acl = modhooks::device::detail::acl;
namespace own = modhooks::device::detail::acl_own;

template <class A, class B>
constexpr bool same = std::is_same_v<A, B>;

/// Compares enumerators of two distinct enum types (ours and CANN's) by value.
template <class A, class B>
constexpr bool equal(A a, B b) {
  return static_cast<long long>(a) == static_cast<long long>(b);
}

// Function prototypes, spelled with CANN's types.
static_assert(same<decltype(&aclInit), acl::InitFn>);
static_assert(same<decltype(&aclGetRecentErrMsg), acl::GetRecentErrMsgFn>);
static_assert(same<decltype(&aclrtSetDevice), acl::SetDeviceFn>);
static_assert(same<decltype(&aclrtGetDevice), acl::GetDeviceFn>);
static_assert(same<decltype(&aclrtCreateStream), acl::CreateStreamFn>);
static_assert(same<decltype(&aclrtSynchronizeStream), acl::SynchronizeStreamFn>);
static_assert(same<decltype(&aclrtMalloc), acl::MallocFn>);
static_assert(same<decltype(&aclrtFree), acl::FreeFn>);
static_assert(same<decltype(&aclrtMemcpyAsync), acl::MemcpyAsyncFn>);
static_assert(same<decltype(&aclrtMemsetAsync), acl::MemsetAsyncFn>);

// modhooks' own types (what the library is compiled with) against CANN's: same ABI.
static_assert(same<own::aclError, ::aclError>);
static_assert(same<own::aclrtStream, ::aclrtStream>);
static_assert(
    same<std::underlying_type_t<own::aclDataType>, std::underlying_type_t<::aclDataType>>);
static_assert(same<std::underlying_type_t<own::aclFormat>, std::underlying_type_t<::aclFormat>>);
static_assert(
    same<std::underlying_type_t<own::aclrtMemcpyKind>, std::underlying_type_t<::aclrtMemcpyKind>>);
static_assert(same<std::underlying_type_t<own::aclrtMemMallocPolicy>,
                   std::underlying_type_t<::aclrtMemMallocPolicy>>);

// Every enumerator and error code modhooks uses, by value.
static_assert(equal(own::ACL_DT_UNDEFINED, ::ACL_DT_UNDEFINED));
static_assert(equal(own::ACL_FLOAT, ::ACL_FLOAT));
static_assert(equal(own::ACL_FLOAT16, ::ACL_FLOAT16));
static_assert(equal(own::ACL_INT8, ::ACL_INT8));
static_assert(equal(own::ACL_INT32, ::ACL_INT32));
static_assert(equal(own::ACL_UINT8, ::ACL_UINT8));
static_assert(equal(own::ACL_INT16, ::ACL_INT16));
static_assert(equal(own::ACL_INT64, ::ACL_INT64));
static_assert(equal(own::ACL_DOUBLE, ::ACL_DOUBLE));
static_assert(equal(own::ACL_BOOL, ::ACL_BOOL));
static_assert(equal(own::ACL_BF16, ::ACL_BF16));
static_assert(equal(own::ACL_FORMAT_UNDEFINED, ::ACL_FORMAT_UNDEFINED));
static_assert(equal(own::ACL_FORMAT_NCHW, ::ACL_FORMAT_NCHW));
static_assert(equal(own::ACL_FORMAT_NHWC, ::ACL_FORMAT_NHWC));
static_assert(equal(own::ACL_FORMAT_ND, ::ACL_FORMAT_ND));
static_assert(equal(own::ACL_FORMAT_NC1HWC0, ::ACL_FORMAT_NC1HWC0));
static_assert(equal(own::ACL_FORMAT_FRACTAL_Z, ::ACL_FORMAT_FRACTAL_Z));
static_assert(equal(own::ACL_FORMAT_NDHWC, ::ACL_FORMAT_NDHWC));
static_assert(equal(own::ACL_FORMAT_FRACTAL_NZ, ::ACL_FORMAT_FRACTAL_NZ));
static_assert(equal(own::ACL_FORMAT_NCDHW, ::ACL_FORMAT_NCDHW));
static_assert(equal(own::ACL_MEMCPY_HOST_TO_HOST, ::ACL_MEMCPY_HOST_TO_HOST));
static_assert(equal(own::ACL_MEMCPY_HOST_TO_DEVICE, ::ACL_MEMCPY_HOST_TO_DEVICE));
static_assert(equal(own::ACL_MEMCPY_DEVICE_TO_HOST, ::ACL_MEMCPY_DEVICE_TO_HOST));
static_assert(equal(own::ACL_MEMCPY_DEVICE_TO_DEVICE, ::ACL_MEMCPY_DEVICE_TO_DEVICE));
static_assert(equal(own::ACL_MEM_MALLOC_HUGE_FIRST, ::ACL_MEM_MALLOC_HUGE_FIRST));
static_assert(equal(own::ACL_MEM_MALLOC_HUGE_ONLY, ::ACL_MEM_MALLOC_HUGE_ONLY));
static_assert(equal(own::ACL_MEM_MALLOC_NORMAL_ONLY, ::ACL_MEM_MALLOC_NORMAL_ONLY));
static_assert(equal(own::ACL_MEM_ACCESS_USER_SPACE_READONLY, ::ACL_MEM_ACCESS_USER_SPACE_READONLY));
static_assert(equal(own::kSuccess, ::ACL_SUCCESS));
static_assert(equal(own::kErrorUninitialize, ::ACL_ERROR_UNINITIALIZE));
static_assert(equal(own::kErrorRepeatInitialize, ::ACL_ERROR_REPEAT_INITIALIZE));
static_assert(equal(own::kErrorBadAlloc, ::ACL_ERROR_BAD_ALLOC));
static_assert(equal(own::kErrorRtContextNull, ACL_ERROR_RT_CONTEXT_NULL));
static_assert(equal(own::kErrorRtInternal, ACL_ERROR_RT_INTERNAL_ERROR));

#if __has_include(<aclnn/acl_meta.h>)
#include <aclnn/acl_meta.h>
static_assert(same<own::aclnnStatus, ::aclnnStatus>);
// acl_api.h declares the aclnn handles as its own opaque structs, so compare the prototypes
// with those handle types substituted: same shape, one pointer per handle.
static_assert(same<decltype(&aclCreateTensor),
                   ::aclTensor* (*)(const int64_t*, uint64_t, ::aclDataType, const int64_t*,
                                    int64_t, ::aclFormat, const int64_t*, uint64_t, void*)>);
static_assert(same<decltype(&aclDestroyTensor), ::aclnnStatus (*)(const ::aclTensor*)>);
static_assert(same<decltype(&aclCreateScalar), ::aclScalar* (*)(void*, ::aclDataType)>);
static_assert(same<decltype(&aclDestroyScalar), ::aclnnStatus (*)(const ::aclScalar*)>);
#endif
#if __has_include(<aclnnop/aclnn_mul.h>)
#include <aclnnop/aclnn_mul.h>
static_assert(same<decltype(&aclnnMulsGetWorkspaceSize),
                   ::aclnnStatus (*)(const ::aclTensor*, const ::aclScalar*, ::aclTensor*,
                                     uint64_t*, ::aclOpExecutor**)>);
static_assert(same<decltype(&aclnnMuls),
                   ::aclnnStatus (*)(void*, uint64_t, ::aclOpExecutor*, ::aclrtStream)>);
#endif
