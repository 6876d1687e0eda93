// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

/// Fake libopapi.so: aclnnMuls (out = self * scalar) for contiguous ND tensors, run on the
/// stream's host queue.

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <string>
#include <type_traits>

#include "fake_acl_state.h"
#include "fake_nnopbase_types.h"
#include "modhooks/device/detail/acl_api.h"

namespace acl = modhooks::device::detail::acl;
using acl::aclDataType;
using acl::aclnnStatus;
using acl::aclOpExecutor;
using acl::aclrtStream;
using acl::aclScalar;
using acl::aclTensor;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {

constexpr aclnnStatus kParamInvalid = 161002;

int64_t item_size(aclDataType t) {
  switch (t) {
    case acl::aclDataType::ACL_FLOAT:
      return 4;
    case acl::aclDataType::ACL_FLOAT16:
    case acl::aclDataType::ACL_BF16:
      return 2;
    case acl::aclDataType::ACL_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

/// Empty string if `t` is a tensor the fake kernel can run on.
std::string check_tensor(const aclTensor* t) {
  if (t == nullptr) return "null tensor";
  if (item_size(t->dtype) == 0) return "unsupported dtype " + std::to_string(t->dtype);
  if (t->format != acl::aclFormat::ACL_FORMAT_ND) return "format is not ND";
  if (t->offset != 0) return "non-zero offset";
  int64_t expected = 1;
  for (size_t i = t->dims.size(); i-- > 0;) {
    if (t->dims[i] != 1 && t->strides[i] != expected) return "not contiguous";
    expected *= t->dims[i];
  }
  int64_t storage = 1;
  for (int64_t d : t->storage_dims) storage *= d;
  if (storage != expected) return "storage dims do not match the view";
  if (expected > 0 && !fake_acl::is_device_range(t->data, expected * item_size(t->dtype))) {
    return "data is not device memory";
  }
  return "";
}

template <class T>
void multiply(const void* in, void* out, int64_t n, double factor) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<double>(src[i]) * factor);
}

void run_muls(const aclOpExecutor& e) {
  switch (e.dtype) {
    case acl::aclDataType::ACL_FLOAT:
      return multiply<float>(e.self, e.out, e.numel, e.factor);
    case acl::aclDataType::ACL_DOUBLE:
      return multiply<double>(e.self, e.out, e.numel, e.factor);
    case acl::aclDataType::ACL_FLOAT16:
      return multiply<c10::Half>(e.self, e.out, e.numel, e.factor);
    default:
      return multiply<c10::BFloat16>(e.self, e.out, e.numel, e.factor);
  }
}

}  // namespace

extern "C" {

aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor* self, const aclScalar* other, aclTensor* out,
                                      uint64_t* workspaceSize, aclOpExecutor** executor) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclnnMulsGetWorkspaceSize", "")) return e;
  std::string problem = check_tensor(self);
  if (problem.empty()) problem = check_tensor(out);
  if (problem.empty() && (self->dims != out->dims || self->dtype != out->dtype)) {
    problem = "self and out differ in shape or dtype";
  }
  if (problem.empty() && other == nullptr) problem = "null scalar";
  if (!problem.empty()) return fake_acl::fail(kParamInvalid, "aclnnMuls: " + problem);
  int64_t numel = 1;
  for (int64_t d : self->dims) numel *= d;
  *workspaceSize = fake_acl::workspace_size();
  *executor = new aclOpExecutor{self->data, out->data, numel, self->dtype, other->value};
  fake_acl::count_object(+1);
  return 0;
}

aclnnStatus aclnnMuls(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                      aclrtStream stream) {
  Lock lock(fake_acl::mutex());
  int injected = fake_acl::enter("aclnnMuls", std::to_string(workspaceSize));
  // The second phase consumes the executor whether or not it succeeds.
  aclOpExecutor planned = *executor;
  delete executor;
  fake_acl::count_object(-1);
  if (injected) return injected;
  if (int e = fake_acl::require_context("aclnnMuls")) return e;
  if (workspaceSize != fake_acl::workspace_size() ||
      (workspaceSize > 0 && !fake_acl::is_device_range(workspace, workspaceSize))) {
    fake_acl::violation("aclnnMuls without the workspace its first phase asked for");
    return fake_acl::fail(kParamInvalid, "aclnnMuls: bad workspace");
  }
  if (!fake_acl::is_stream(stream)) {
    fake_acl::violation("aclnnMuls on an unknown or null stream");
    return fake_acl::fail(kParamInvalid, "aclnnMuls: bad stream");
  }
  size_t bytes = static_cast<size_t>(planned.numel * item_size(planned.dtype));
  std::vector<fake_acl::Range> touches{{planned.self, bytes}, {planned.out, bytes}};
  if (workspaceSize > 0) touches.push_back({workspace, workspaceSize});
  fake_acl::enqueue(static_cast<fake_acl::Stream*>(stream),
                    {touches, [planned] { run_muls(planned); }});
  return 0;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&aclnnMulsGetWorkspaceSize), acl::MulsGetWorkspaceSizeFn>);
static_assert(std::is_same_v<decltype(&aclnnMuls), acl::MulsFn>);
