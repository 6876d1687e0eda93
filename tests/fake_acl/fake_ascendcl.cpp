// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

/// Fake libascendcl.so: the ACL runtime calls modhooks makes, on host memory.

#include <cstring>
#include <sstream>
#include <type_traits>

#include "fake_acl_state.h"
#include "modhooks/device/detail/acl_api.h"

namespace acl = modhooks::device::detail::acl;
using acl::aclError;
using acl::aclrtMemcpyKind;
using acl::aclrtMemMallocPolicy;
using acl::aclrtStream;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {

std::string hex(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

std::string stream_name(aclrtStream stream) {
  if (!fake_acl::is_stream(stream)) return "invalid";
  return "S" + std::to_string(static_cast<fake_acl::Stream*>(stream)->id);
}

/// Checks a stream argument; a null or unknown stream is a modhooks bug worth a violation.
fake_acl::Stream* checked_stream(const char* api, aclrtStream stream) {
  if (!fake_acl::is_stream(stream)) {
    fake_acl::violation(std::string(api) + " on an unknown or null stream");
    return nullptr;
  }
  return static_cast<fake_acl::Stream*>(stream);
}

}  // namespace

extern "C" {

aclError aclInit(const char* configPath) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclInit", configPath ? configPath : "null")) return e;
  if (fake_acl::initialised()) return fake_acl::fail(100002, "aclInit: already initialised");
  fake_acl::set_initialised(true);
  return 0;
}

aclError aclFinalize() {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclFinalize", "")) return e;
  fake_acl::set_initialised(false);
  return 0;
}

const char* aclGetRecentErrMsg() { return fake_acl::recent_error(); }

aclError aclrtSetDevice(int32_t deviceId) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtSetDevice", std::to_string(deviceId))) return e;
  if (!fake_acl::initialised()) return fake_acl::fail(100001, "aclrtSetDevice before aclInit");
  if (deviceId < 0 || deviceId >= fake_acl::device_count()) {
    return fake_acl::fail(107001, "aclrtSetDevice: invalid device " + std::to_string(deviceId));
  }
  fake_acl::thread_device() = deviceId;
  return 0;
}

aclError aclrtGetDevice(int32_t* deviceId) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtGetDevice", "")) return e;
  if (int e = fake_acl::require_context("aclrtGetDevice")) return e;
  *deviceId = fake_acl::thread_device();
  return 0;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtCreateStream", "")) return e;
  if (int e = fake_acl::require_context("aclrtCreateStream")) return e;
  *stream = fake_acl::create_stream(fake_acl::thread_device());
  return 0;
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  Lock lock(fake_acl::mutex());
  int injected = fake_acl::enter("aclrtSynchronizeStream", stream_name(stream));
  auto* s = checked_stream("aclrtSynchronizeStream", stream);
  if (injected) {
    // A failed synchronisation means the device aborted the queued work.
    if (s) fake_acl::drop_pending(s);
    return injected;
  }
  if (int e = fake_acl::require_context("aclrtSynchronizeStream")) return e;
  if (!s) return fake_acl::fail(107000, "aclrtSynchronizeStream: unknown stream");
  fake_acl::run_pending(s);
  return 0;
}

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtMalloc", std::to_string(size) + " policy=" +
                                                 std::to_string(static_cast<int>(policy)))) {
    return e;
  }
  if (int e = fake_acl::require_context("aclrtMalloc")) return e;
  *devPtr = fake_acl::allocate(size, fake_acl::thread_device());
  return 0;
}

aclError aclrtFree(void* devPtr) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtFree", hex(devPtr))) return e;
  if (!fake_acl::release(devPtr)) {
    fake_acl::violation("aclrtFree of an address aclrtMalloc did not return");
    return fake_acl::fail(100000, "aclrtFree: not an allocation");
  }
  return 0;
}

aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter("aclrtMemcpyAsync", std::to_string(count) + " kind=" +
                                                      std::to_string(static_cast<int>(kind)) + " " +
                                                      stream_name(stream))) {
    return e;
  }
  if (int e = fake_acl::require_context("aclrtMemcpyAsync")) return e;
  auto* s = checked_stream("aclrtMemcpyAsync", stream);
  if (!s) return fake_acl::fail(107000, "aclrtMemcpyAsync: unknown stream");
  bool dst_dev = kind == acl::aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE ||
                 kind == acl::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE;
  bool src_dev = kind == acl::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST ||
                 kind == acl::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE;
  if (count > destMax || (dst_dev && !fake_acl::is_device_range(dst, count)) ||
      (src_dev && !fake_acl::is_device_range(src, count))) {
    fake_acl::violation("aclrtMemcpyAsync outside device memory or past destMax");
    return fake_acl::fail(100000, "aclrtMemcpyAsync: invalid range");
  }
  std::vector<fake_acl::Range> touches;
  if (dst_dev) touches.push_back({dst, count});
  if (src_dev) touches.push_back({src, count});
  fake_acl::enqueue(s, {touches, [dst, src, count] { std::memcpy(dst, src, count); }});
  return 0;
}

aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                          aclrtStream stream) {
  Lock lock(fake_acl::mutex());
  if (int e = fake_acl::enter(
          "aclrtMemsetAsync",
          std::to_string(count) + " value=" + std::to_string(value) + " " + stream_name(stream))) {
    return e;
  }
  if (int e = fake_acl::require_context("aclrtMemsetAsync")) return e;
  auto* s = checked_stream("aclrtMemsetAsync", stream);
  if (!s) return fake_acl::fail(107000, "aclrtMemsetAsync: unknown stream");
  if (count > maxCount || !fake_acl::is_device_range(devPtr, count)) {
    fake_acl::violation("aclrtMemsetAsync outside device memory or past maxCount");
    return fake_acl::fail(100000, "aclrtMemsetAsync: invalid range");
  }
  fake_acl::enqueue(
      s, {{{devPtr, count}}, [devPtr, value, count] { std::memset(devPtr, value, count); }});
  return 0;
}

}  // extern "C"

// The fake must be callable through exactly the pointer types modhooks resolves.
static_assert(std::is_same_v<decltype(&aclInit), acl::InitFn>);
static_assert(std::is_same_v<decltype(&aclGetRecentErrMsg), acl::GetRecentErrMsgFn>);
static_assert(std::is_same_v<decltype(&aclrtSetDevice), acl::SetDeviceFn>);
static_assert(std::is_same_v<decltype(&aclrtGetDevice), acl::GetDeviceFn>);
static_assert(std::is_same_v<decltype(&aclrtCreateStream), acl::CreateStreamFn>);
static_assert(std::is_same_v<decltype(&aclrtSynchronizeStream), acl::SynchronizeStreamFn>);
static_assert(std::is_same_v<decltype(&aclrtMalloc), acl::MallocFn>);
static_assert(std::is_same_v<decltype(&aclrtFree), acl::FreeFn>);
static_assert(std::is_same_v<decltype(&aclrtMemcpyAsync), acl::MemcpyAsyncFn>);
static_assert(std::is_same_v<decltype(&aclrtMemsetAsync), acl::MemsetAsyncFn>);
