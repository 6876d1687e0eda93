// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/device/detail/acl_runtime.h"

#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "modhooks/core/error.h"
#include "modhooks/device/acl_library.h"

#if TORCH_VERSION_MAJOR >= 2
#include <c10/core/impl/DeviceGuardImplInterface.h>
#endif

MODHOOKS_BEGIN_NAMESPACE
namespace device {
namespace {

#if defined(__aarch64__)
constexpr const char* kArchDir = "aarch64-linux";
#else
constexpr const char* kArchDir = "x86_64-linux";
#endif

constexpr const char* kRuntimeLibrary = "libascendcl.so";
constexpr const char* kTensorLibrary = "libnnopbase.so";
constexpr const char* kOperatorLibrary = "libopapi.so";

/// Guards the explicit directory and the creation of the process-wide runtime.
std::mutex g_mutex;
std::string g_explicit_dir;
std::atomic<detail::AclRuntime*> g_runtime{nullptr};

std::vector<std::string> search_paths_locked() {
  std::vector<std::string> dirs;
  auto add = [&dirs](const std::string& dir) {
    if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
      dirs.push_back(dir);
    }
  };
  add(g_explicit_dir);
  if (const char* dir = std::getenv("MODHOOKS_ACL_LIB_DIR")) add(dir);
  auto add_root = [&](const std::string& root) {
    add(root + "/lib64");
    add(root + "/" + kArchDir + "/lib64");
  };
  for (const char* var : {"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) {
    const char* root = std::getenv(var);
    if (root && *root) add_root(root);
  }
  add_root("/usr/local/Ascend/ascend-toolkit/latest");
  add_root("/usr/local/Ascend/cann");
  return dirs;
}

std::string describe(const std::string& dir) {
  return dir.empty() ? "the dynamic loader's search (LD_LIBRARY_PATH, ld.so.cache)" : dir;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

/// Directory of the loaded object that defines `symbol`.
std::string directory_of(void* symbol) {
  Dl_info info{};
  if (symbol && dladdr(symbol, &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
  }
  return "";
}

/// Opens `name` from `dir`, preferring a copy the process already has.
void* open_library(const std::string& dir, const char* name) {
  if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return h;
  std::string path = dir.empty() ? name : dir + "/" + name;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    modhooks::detail::fail<RuntimeError>(
        "device.acl.load_failed",
        "modhooks: cannot load " + path + " for the NPU backend: " + dl_error());
  }
  return h;
}

template <class Fn>
Fn resolve(void* handle, const char* library, const char* symbol) {
  void* p = dlsym(handle, symbol);
  if (!p) {
    modhooks::detail::fail<RuntimeError>("device.acl.missing_symbol",
                                         std::string("modhooks: ") + library + " has no " + symbol +
                                             "; this CANN is too old for the NPU backend");
  }
  return reinterpret_cast<Fn>(p);
}

const char* error_name(int code) {
  switch (code) {
    case 100000:
      return "ACL_ERROR_INVALID_PARAM";
    case 100001:
      return "ACL_ERROR_UNINITIALIZE";
    case 100002:
      return "ACL_ERROR_REPEAT_INITIALIZE";
    case 107000:
      return "ACL_ERROR_RT_PARAM_INVALID";
    case 107001:
      return "ACL_ERROR_RT_INVALID_DEVICEID";
    case 107002:
      return "ACL_ERROR_RT_CONTEXT_NULL";
    case 161001:
      return "ACLNN_ERR_PARAM_NULLPTR";
    case 161002:
      return "ACLNN_ERR_PARAM_INVALID";
    case 200000:
      return "ACL_ERROR_BAD_ALLOC";
    case 200001:
      return "ACL_ERROR_API_NOT_SUPPORT";
    case 200002:
      return "ACL_ERROR_INVALID_DEVICE";
    case 500000:
      return "ACL_ERROR_INTERNAL_ERROR";
    case 500001:
      return "ACL_ERROR_FAILURE";
    case 507000:
      return "ACL_ERROR_RT_INTERNAL_ERROR";
    case 561000:
      return "ACLNN_ERR_INNER";
    default:
      return nullptr;
  }
}

}  // namespace

void set_acl_library_path(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto* runtime = g_runtime.load()) {
    modhooks::detail::fail<RuntimeError>("device.acl.already_loaded",
                                         "modhooks: set_acl_library_path(\"" + dir +
                                             "\") comes too late: ACL is already loaded from " +
                                             runtime->directory());
  }
  g_explicit_dir = dir;
}

std::vector<std::string> acl_search_paths() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return search_paths_locked();
}

namespace detail {

AclRuntime& AclRuntime::get() {
  if (auto* runtime = g_runtime.load(std::memory_order_acquire)) return *runtime;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto* runtime = g_runtime.load()) return *runtime;
  auto dirs = search_paths_locked();
  dirs.emplace_back();  // the loader's own search comes last
  // Never deleted: hooks may run during static destruction, and ACL is never torn down.
  auto* runtime = new AclRuntime(dirs);
  g_runtime.store(runtime, std::memory_order_release);
  return *runtime;
}

AclRuntime::AclRuntime(const std::vector<std::string>& dirs) {
  void* runtime = dlopen(kRuntimeLibrary, RTLD_NOW | RTLD_NOLOAD);
  if (runtime) {
    directory_ = directory_of(dlsym(runtime, "aclInit"));
  } else {
    std::string tried;
    for (const auto& dir : dirs) {
      std::string path = dir.empty() ? kRuntimeLibrary : dir + "/" + kRuntimeLibrary;
      if (!dir.empty() && access(path.c_str(), F_OK) != 0) {
        tried += "\n  " + describe(dir) + ": no " + kRuntimeLibrary;
        continue;
      }
      runtime = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (runtime) {
        directory_ = dir.empty() ? directory_of(dlsym(runtime, "aclInit")) : dir;
        break;
      }
      tried += "\n  " + describe(dir) + ": " + dl_error();
    }
    if (!runtime) {
      modhooks::detail::fail<RuntimeError>(
          "device.acl.not_found",
          std::string("modhooks: the NPU backend needs CANN's ACL runtime (") + kRuntimeLibrary +
              ") and found none. Searched, in order:" + tried +
              "\nInstall CANN and source its set_env.sh, set MODHOOKS_ACL_LIB_DIR, or call "
              "modhooks::device::set_acl_library_path().");
    }
  }
  void* tensors = open_library(directory_, kTensorLibrary);
  void* operators = open_library(directory_, kOperatorLibrary);

  fn_.init = resolve<acl::InitFn>(runtime, kRuntimeLibrary, "aclInit");
  fn_.get_recent_err_msg =
      resolve<acl::GetRecentErrMsgFn>(runtime, kRuntimeLibrary, "aclGetRecentErrMsg");
  fn_.set_device = resolve<acl::SetDeviceFn>(runtime, kRuntimeLibrary, "aclrtSetDevice");
  fn_.get_device = resolve<acl::GetDeviceFn>(runtime, kRuntimeLibrary, "aclrtGetDevice");
  fn_.create_stream = resolve<acl::CreateStreamFn>(runtime, kRuntimeLibrary, "aclrtCreateStream");
  fn_.synchronize_stream =
      resolve<acl::SynchronizeStreamFn>(runtime, kRuntimeLibrary, "aclrtSynchronizeStream");
  fn_.malloc = resolve<acl::MallocFn>(runtime, kRuntimeLibrary, "aclrtMalloc");
  fn_.free = resolve<acl::FreeFn>(runtime, kRuntimeLibrary, "aclrtFree");
  fn_.memcpy_async = resolve<acl::MemcpyAsyncFn>(runtime, kRuntimeLibrary, "aclrtMemcpyAsync");
  fn_.memset_async = resolve<acl::MemsetAsyncFn>(runtime, kRuntimeLibrary, "aclrtMemsetAsync");
  fn_.create_tensor = resolve<acl::CreateTensorFn>(tensors, kTensorLibrary, "aclCreateTensor");
  fn_.destroy_tensor = resolve<acl::DestroyTensorFn>(tensors, kTensorLibrary, "aclDestroyTensor");
  fn_.create_scalar = resolve<acl::CreateScalarFn>(tensors, kTensorLibrary, "aclCreateScalar");
  fn_.destroy_scalar = resolve<acl::DestroyScalarFn>(tensors, kTensorLibrary, "aclDestroyScalar");
  fn_.destroy_executor =
      reinterpret_cast<acl::DestroyExecutorFn>(dlsym(tensors, "aclDestroyAclOpExecutor"));
  // dlsym on a handle also searches that library's dependencies, so CANN releases that split
  // libopapi.so into libopapi_math.so and friends resolve through the same handle.
  fn_.muls_get_workspace_size = resolve<acl::MulsGetWorkspaceSizeFn>(operators, kOperatorLibrary,
                                                                     "aclnnMulsGetWorkspaceSize");
  fn_.muls = resolve<acl::MulsFn>(operators, kOperatorLibrary, "aclnnMuls");

  int code = fn_.init(nullptr);
  if (code != acl_own::kErrorRepeatInitialize) check(code, "aclInit(nullptr)");

#if TORCH_VERSION_MAJOR >= 2
  // torch_npu exports only C++ symbols. NPUStream::stream() const returns the aclrtStream and
  // first drains torch_npu's task queue, so our work is ordered after its queued kernels. It is
  // a non-virtual member of a class whose only member is a c10::Stream, so under the Itanium C++
  // ABI it is a function taking `this` as its only argument, and a c10::Stream stands in for
  // the NPUStream. The current c10::Stream itself comes through libtorch's public device guard.
  torch_npu_stream_ =
      reinterpret_cast<NpuStreamFn>(dlsym(RTLD_DEFAULT, "_ZNK7c10_npu9NPUStream6streamEv"));
#endif
}

void AclRuntime::check(int code, const std::string& what) const {
  if (code == acl_own::kSuccess) return;
  const char* name = error_name(code);
  modhooks::detail::fail<RuntimeError>(
      "device.acl.call_failed", "modhooks: ACL error " + std::to_string(code) +
                                    (name ? std::string(" (") + name + ")" : "") + " from " + what +
                                    ": " + recent_message());
}

std::string AclRuntime::recent_message() const {
  const char* message = fn_.get_recent_err_msg();
  return message && *message ? message : "aclGetRecentErrMsg() gave no message";
}

acl::aclrtStream AclRuntime::stream(int32_t device) {
#if TORCH_VERSION_MAJOR >= 2
  if (torch_npu_stream_ && c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1)) {
    c10::Stream current = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
                              ->getStream(c10::Device(c10::DeviceType::PrivateUse1,
                                                      static_cast<c10::DeviceIndex>(device)));
    return torch_npu_stream_(&current);
  }
#endif
  std::lock_guard<std::mutex> lock(streams_mutex_);
  auto it = owned_streams_.find(device);
  if (it != owned_streams_.end()) return it->second;
  acl::aclrtStream created = nullptr;
  check(fn_.create_stream(&created), "aclrtCreateStream on npu:" + std::to_string(device));
  owned_streams_.emplace(device, created);
  return created;
}

DeviceBinding::DeviceBinding(const AclRuntime& runtime, int32_t device) : runtime_(runtime) {
  int32_t current = -1;
  if (runtime.fn().get_device(&current) == acl_own::kSuccess) {
    if (current == device) return;
    previous_ = current;
  }
  runtime.check(runtime.fn().set_device(device), "aclrtSetDevice(" + std::to_string(device) + ")");
}

DeviceBinding::~DeviceBinding() {
  if (previous_ >= 0) runtime_.fn().set_device(previous_);
}

}  // namespace detail
}  // namespace device
MODHOOKS_END_NAMESPACE
