// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The loaded ACL libraries and what modhooks keeps per process: the resolved entry points, the
/// one aclInit, and the streams it owns. Internal to the NPU backend; tests use it directly.

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "modhooks/device/detail/acl_api.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device::detail {

/// Entry points resolved with dlsym; all non-null except destroy_executor (newer CANN only).
struct AclFunctions {
  acl::InitFn init;
  acl::GetRecentErrMsgFn get_recent_err_msg;
  acl::SetDeviceFn set_device;
  acl::GetDeviceFn get_device;
  acl::CreateStreamFn create_stream;
  acl::SynchronizeStreamFn synchronize_stream;
  acl::MallocFn malloc;
  acl::FreeFn free;
  acl::MemcpyAsyncFn memcpy_async;
  acl::MemsetAsyncFn memset_async;
  acl::CreateTensorFn create_tensor;
  acl::DestroyTensorFn destroy_tensor;
  acl::CreateScalarFn create_scalar;
  acl::DestroyScalarFn destroy_scalar;
  acl::DestroyExecutorFn destroy_executor;
  acl::MulsGetWorkspaceSizeFn muls_get_workspace_size;
  acl::MulsFn muls;
};

class AclRuntime {
 public:
  /// The process-wide runtime, loaded from acl_search_paths() and initialised on first use. A
  /// failed load is not remembered: the next call searches again.
  static AclRuntime& get();

  /// Loads from the first of `dirs` holding libascendcl.so ("" stands for the loader's own
  /// search) and calls aclInit, accepting "already initialised" (100002). Throws modhooks::Error
  /// listing every directory tried and why each failed. Never calls aclFinalize: torch_npu or
  /// the application may still be using ACL, and process exit tears the device down anyway.
  /// The libraries stay loaded after destruction: ACL must outlive every stream and block it
  /// handed out, and a second instance finds them already loaded.
  explicit AclRuntime(const std::vector<std::string>& dirs);
  AclRuntime(const AclRuntime&) = delete;
  AclRuntime& operator=(const AclRuntime&) = delete;

  const AclFunctions& fn() const { return fn_; }
  /// Directory the libraries came from (where the already loaded libascendcl.so lives, if so).
  const std::string& directory() const { return directory_; }

  /// Throws modhooks::Error for a non-zero `code`, with the code, its name where known and
  /// aclGetRecentErrMsg(); `what` names the call and what modhooks was doing.
  void check(int code, const std::string& what) const;
  /// aclGetRecentErrMsg(), or a note that it had none; for calls that fail by returning null.
  std::string recent_message() const;

  /// The stream NPU work goes on: torch_npu's current stream for `device` when torch_npu is in
  /// the process, otherwise one this runtime creates per device and keeps for the process
  /// lifetime. The caller has bound `device` (DeviceBinding).
  acl::aclrtStream stream(int32_t device);

  /// Whether stream() hands out torch_npu's streams.
  bool uses_torch_npu_stream() const { return torch_npu_stream_ != nullptr; }

 private:
  /// c10_npu::NPUStream::stream() const, called with `this` pointing at a c10::Stream.
  using NpuStreamFn = void* (*)(const void* self);

  std::string directory_;
  AclFunctions fn_{};
  NpuStreamFn torch_npu_stream_ = nullptr;
  std::mutex streams_mutex_;
  std::unordered_map<int32_t, acl::aclrtStream> owned_streams_;
};

/// Makes `device` current for ACL on this thread for the scope, and puts back the device the
/// thread had before. Autograd runs backward hooks on worker threads that never bound a device;
/// ACL binds devices per thread, so every NPU operation opens one of these first.
class DeviceBinding {
 public:
  DeviceBinding(const AclRuntime& runtime, int32_t device);
  ~DeviceBinding();
  DeviceBinding(const DeviceBinding&) = delete;
  DeviceBinding& operator=(const DeviceBinding&) = delete;

 private:
  const AclRuntime& runtime_;
  int32_t previous_ = -1;  // -1: nothing to restore
};

}  // namespace device::detail
MODHOOKS_END_NAMESPACE
