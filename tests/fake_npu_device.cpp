// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "fake_npu_device.h"

#if MODHOOKS_FAKE_NPU

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "modhooks/device/detail/acl_runtime.h"

namespace fake_npu {
namespace {

using modhooks::device::detail::AclRuntime;
using modhooks::device::detail::DeviceBinding;
namespace own = modhooks::device::detail::acl_own;

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

/// Device-to-host or host-to-device copy through the fake runtime, on modhooks' stream.
void copy(void* dst, const void* src, size_t n, own::aclrtMemcpyKind kind) {
  if (n == 0) return;
  AclRuntime& rt = AclRuntime::get();
  DeviceBinding bind(rt, 0);
  auto stream = rt.stream(0);
  rt.check(rt.fn().memcpy_async(dst, n, src, n, kind, stream), "fake npu copy");
  rt.check(rt.fn().synchronize_stream(stream), "fake npu copy");
}

void release(void* p) {
  AclRuntime& rt = AclRuntime::get();
  DeviceBinding bind(rt, 0);
  rt.fn().free(p);
}

struct Allocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n > 0) {
      AclRuntime& rt = AclRuntime::get();
      DeviceBinding bind(rt, 0);
      rt.check(rt.fn().malloc(&p, n, own::ACL_MEM_MALLOC_HUGE_FIRST), "fake npu allocator");
    }
    return {p, p, &release, c10::Device(kNpu, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    copy(dest, src, count, own::ACL_MEMCPY_DEVICE_TO_DEVICE);
  }
};

Allocator g_allocator;

/// One device, index 0, one stream; records the current device without touching ACL (unlike
/// torch_npu's), so modhooks has to bind the device on autograd threads itself.
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(kNpu, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

/// What autograd asks of a PrivateUse1 backend before it runs a graph on it.
struct Hooks final : at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
};

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>,
                 std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

/// The whole storage of an npu tensor copied to the host, viewed with the tensor's geometry.
at::Tensor host_view(const at::Tensor& t) {
  const size_t n = t.storage().nbytes();
  at::Tensor bytes = at::empty({static_cast<int64_t>(n)}, at::kByte);
  copy(bytes.data_ptr(), t.storage().data(), n, own::ACL_MEMCPY_DEVICE_TO_HOST);
  return at::empty({0}, t.options().device(at::kCPU))
      .set_(bytes.storage(), t.storage_offset(), t.sizes(), t.strides());
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  at::Tensor src = self.is_cpu() ? self : host_view(self);
  if (dst.is_cpu()) return dst.copy_(src);
  at::Tensor staged = host_view(dst);
  staged.copy_(src);
  copy(dst.storage().mutable_data(), staged.storage().data(), dst.storage().nbytes(),
       own::ACL_MEMCPY_HOST_TO_DEVICE);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "fake npu: _copy_from_and_resize cannot resize");
  return copy_from(self, dst, false);
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace

bool enable(std::string*) {
  static const bool named = [] {
    c10::register_privateuse1_backend("npu");
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
    return true;
  }();
  return named;
}

}  // namespace fake_npu

#else

namespace fake_npu {

bool enable(std::string* why_not) {
  *why_not = "the fake npu device needs libtorch 2.4+ (this is " TORCH_VERSION ")";
  return false;
}

}  // namespace fake_npu

#endif
