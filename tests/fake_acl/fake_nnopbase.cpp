// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

/// Fake libnnopbase.so: aclTensor / aclScalar handles and executor disposal.

#include <string>
#include <type_traits>

#include "fake_acl_state.h"
#include "fake_nnopbase_types.h"
#include "modhooks/device/detail/acl_api.h"

namespace acl = modhooks::device::detail::acl;
using acl::aclDataType;
using acl::aclFormat;
using acl::aclnnStatus;
using acl::aclOpExecutor;
using acl::aclScalar;
using acl::aclTensor;
using Lock = std::lock_guard<std::recursive_mutex>;

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
  Lock lock(fake_acl::mutex());
  if (fake_acl::enter("aclCreateTensor", "dtype=" + std::to_string(dataType) +
                                             " format=" + std::to_string(format) +
                                             " offset=" + std::to_string(offset))) {
    return nullptr;
  }
  auto* t = new aclTensor{{viewDims, viewDims + viewDimsNum},
                          {stride, stride + viewDimsNum},
                          offset,
                          dataType,
                          format,
                          {storageDims, storageDims + storageDimsNum},
                          tensorData};
  fake_acl::count_object(+1);
  return t;
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclDestroyTensor", "")) return e;
  delete tensor;
  fake_acl::count_object(-1);
  return 0;
}

aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  Lock lock(fake_acl::mutex());
  if (fake_acl::enter("aclCreateScalar", "dtype=" + std::to_string(dataType))) return nullptr;
  double v;
  if (dataType == acl::aclDataType::ACL_FLOAT) {
    v = *static_cast<float*>(value);
  } else if (dataType == acl::aclDataType::ACL_DOUBLE) {
    v = *static_cast<double*>(value);
  } else {
    fake_acl::fail(161002, "aclCreateScalar: the fake supports FLOAT and DOUBLE scalars");
    return nullptr;
  }
  fake_acl::count_object(+1);
  return new aclScalar{v, dataType};
}

aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclDestroyScalar", "")) return e;
  delete scalar;
  fake_acl::count_object(-1);
  return 0;
}

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclDestroyAclOpExecutor", "")) return e;
  delete executor;
  fake_acl::count_object(-1);
  return 0;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&aclCreateTensor), acl::CreateTensorFn>);
static_assert(std::is_same_v<decltype(&aclDestroyTensor), acl::DestroyTensorFn>);
static_assert(std::is_same_v<decltype(&aclCreateScalar), acl::CreateScalarFn>);
static_assert(std::is_same_v<decltype(&aclDestroyScalar), acl::DestroyScalarFn>);
static_assert(std::is_same_v<decltype(&aclDestroyAclOpExecutor), acl::DestroyExecutorFn>);
