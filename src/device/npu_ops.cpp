// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/device/detail/npu_ops.h"

#include <functional>
#include <string>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/device/detail/acl_runtime.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail {
namespace {

std::string where(const NpuBuffer& b) { return "npu:" + std::to_string(b.device); }

acl::aclDataType acl_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return acl_own::ACL_FLOAT;
    case c10::ScalarType::Half:
      return acl_own::ACL_FLOAT16;
    case c10::ScalarType::BFloat16:
      return acl_own::ACL_BF16;
    case c10::ScalarType::Double:
      return acl_own::ACL_DOUBLE;
    default:
      modhooks::detail::fail<RuntimeError>(
          "device.npu.unsupported_dtype",
          std::string("modhooks: the NPU backend scales float, half, bfloat16 and double "
                      "tensors only, not ") +
              c10::toString(t));
  }
}

/// Owns one thing ACL handed out and releases it on every path out of the call, in reverse order
/// of creation. Errors from a release cannot be reported and leave nothing more to free.
template <class T, class Release>
class Owned {
 public:
  Owned(T* p, Release release) : p_(p), release_(release) {}
  ~Owned() {
    if (p_) release_(p_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T* get() const { return p_; }
  /// For ACL calls that create the object through an out-parameter.
  T** out() { return &p_; }
  /// Gives up ownership, for objects a later call consumes.
  T* release() { return std::exchange(p_, nullptr); }

 private:
  T* p_;
  Release release_;
};

acl::aclTensor* make_tensor(const AclRuntime& rt, const NpuBuffer& b, acl::aclDataType dtype) {
  std::vector<int64_t> strides(b.sizes.size());
  int64_t stride = 1;
  for (size_t i = b.sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= b.sizes[i];
  }
  const int64_t storage = b.numel();
  acl::aclTensor* t =
      rt.fn().create_tensor(b.sizes.data(), b.sizes.size(), dtype, strides.data(),
                            /*offset=*/0, acl_own::ACL_FORMAT_ND, &storage, 1, b.data);
  if (!t)
    modhooks::detail::fail<RuntimeError>(
        "device.acl.create_failed",
        "modhooks: aclCreateTensor on " + where(b) + " failed: " + rt.recent_message());
  return t;
}

}  // namespace

int64_t NpuBuffer::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

size_t NpuBuffer::nbytes() const { return static_cast<size_t>(numel()) * c10::elementSize(dtype); }

void npu_fill_zero(const NpuBuffer& dst) {
  const size_t n = dst.nbytes();
  if (n == 0) return;
  AclRuntime& rt = AclRuntime::get();
  DeviceBinding bind(rt, dst.device);
  acl::aclrtStream stream = rt.stream(dst.device);
  rt.check(rt.fn().memset_async(dst.data, n, 0, n, stream), "aclrtMemsetAsync on " + where(dst));
  rt.check(rt.fn().synchronize_stream(stream), "aclrtSynchronizeStream on " + where(dst));
}

void npu_mul(const NpuBuffer& src, double factor, const NpuBuffer& dst) {
  if (src.sizes != dst.sizes || src.dtype != dst.dtype || src.device != dst.device) {
    modhooks::detail::fail<RuntimeError>(
        "device.npu.mismatched_buffers",
        "modhooks: npu_mul needs source and destination of one shape, dtype and device");
  }
  const acl::aclDataType dtype = acl_dtype(src.dtype);
  if (src.numel() == 0) return;
  AclRuntime& rt = AclRuntime::get();
  DeviceBinding bind(rt, src.device);
  acl::aclrtStream stream = rt.stream(src.device);

  auto destroy_tensor = [&rt](acl::aclTensor* p) { rt.fn().destroy_tensor(p); };
  Owned self(make_tensor(rt, src, dtype), destroy_tensor);
  Owned out(make_tensor(rt, dst, dtype), destroy_tensor);
  // Double tensors get a double factor; the others a float one, which aclnnMuls casts.
  float factor_f = static_cast<float>(factor);
  const bool wide = dtype == acl_own::ACL_DOUBLE;
  Owned scalar(
      rt.fn().create_scalar(wide ? static_cast<void*>(&factor) : static_cast<void*>(&factor_f),
                            wide ? acl_own::ACL_DOUBLE : acl_own::ACL_FLOAT),
      [&rt](acl::aclScalar* p) { rt.fn().destroy_scalar(p); });
  if (!scalar.get()) {
    modhooks::detail::fail<RuntimeError>(
        "device.acl.create_failed",
        "modhooks: aclCreateScalar on " + where(src) + " failed: " + rt.recent_message());
  }

  uint64_t workspace_size = 0;
  // An executor whose second phase never runs is disposed of where CANN allows it (newer
  // releases export aclDestroyAclOpExecutor); older ones leak it, as their own callers do.
  Owned<acl::aclOpExecutor, std::function<void(acl::aclOpExecutor*)>> executor(
      nullptr, [&rt](acl::aclOpExecutor* p) {
        if (rt.fn().destroy_executor) rt.fn().destroy_executor(p);
      });
  rt.check(rt.fn().muls_get_workspace_size(self.get(), scalar.get(), out.get(), &workspace_size,
                                           executor.out()),
           "aclnnMulsGetWorkspaceSize on " + where(src));
  Owned<void, std::function<void(void*)>> workspace(nullptr, [&rt](void* p) { rt.fn().free(p); });
  if (workspace_size > 0) {
    rt.check(rt.fn().malloc(workspace.out(), workspace_size, acl_own::ACL_MEM_MALLOC_HUGE_FIRST),
             "aclrtMalloc of a " + std::to_string(workspace_size) +
                 "-byte aclnnMuls workspace on " + where(src));
  }
  // The second phase consumes the executor, successful or not.
  rt.check(rt.fn().muls(workspace.get(), workspace_size, executor.release(), stream),
           "aclnnMuls on " + where(src));
  // The workspace may only be freed once the kernel is done with it.
  rt.check(rt.fn().synchronize_stream(stream), "aclrtSynchronizeStream on " + where(src));
}

void npu_copy_to_host(const NpuBuffer& src, void* host) {
  const size_t n = src.nbytes();
  if (n == 0) return;
  AclRuntime& rt = AclRuntime::get();
  DeviceBinding bind(rt, src.device);
  acl::aclrtStream stream = rt.stream(src.device);
  rt.check(rt.fn().memcpy_async(host, n, src.data, n, acl_own::ACL_MEMCPY_DEVICE_TO_HOST, stream),
           "aclrtMemcpyAsync to host from " + where(src));
  rt.check(rt.fn().synchronize_stream(stream), "aclrtSynchronizeStream on " + where(src));
}

}  // namespace device::detail
MODHOOKS_END_NAMESPACE
