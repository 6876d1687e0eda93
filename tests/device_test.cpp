// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause

// The NPU backend against the fake ACL runtime (tests/fake_acl), loaded through the backend's
// real dlopen path: results, call sequences, device binding, and every injected error turning
// into a clear modhooks::Error with nothing leaked. ctest runs each test in its own process.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "fake_acl.h"
#include "fake_npu_device.h"
#include "modhooks/core/error.h"
#include "modhooks/device/acl_library.h"
#include "modhooks/device/backend.h"
#include "modhooks/device/detail/acl_runtime.h"
#include "modhooks/device/detail/npu_ops.h"
#include "modhooks/device/grad.h"
#include "test_util.h"

namespace {

using modhooks::device::detail::AclRuntime;
using modhooks::device::detail::DeviceBinding;
using modhooks::device::detail::NpuBuffer;
namespace detail = modhooks::device::detail;
namespace own = modhooks::device::detail::acl_own;

/// Points modhooks at the fakes, once per process, before anything loads ACL.
AclRuntime& runtime() {
  static const bool configured = [] {
    modhooks::device::set_acl_library_path(FAKE_ACL_DIR);
    return true;
  }();
  (void)configured;
  return AclRuntime::get();
}

/// API names of the calls since the last fake_acl_reset(), in order.
std::vector<std::string> calls() {
  std::vector<std::string> names;
  std::istringstream lines(fake_acl_calls());
  for (std::string line; std::getline(lines, line);)
    names.push_back(line.substr(0, line.find(' ')));
  return names;
}

long count(const std::vector<std::string>& names, const std::string& api) {
  return std::count(names.begin(), names.end(), api);
}

/// Position of the first `api` at or after `from`, or npos.
size_t find(const std::vector<std::string>& names, const std::string& api, size_t from = 0) {
  auto it = std::find(names.begin() + std::min(from, names.size()), names.end(), api);
  return it == names.end() ? std::string::npos : static_cast<size_t>(it - names.begin());
}

/// Fake device memory for one test. The fake's device memory is host memory, so tests fill and
/// read it directly; results only appear there once the backend has synchronised the stream.
class Block {
 public:
  Block(std::vector<int64_t> sizes, c10::ScalarType dtype, int32_t device = 0)
      : buffer_{nullptr, std::move(sizes), dtype, device} {
    AclRuntime& rt = runtime();
    DeviceBinding bind(rt, device);
    rt.check(rt.fn().malloc(&buffer_.data, std::max<size_t>(buffer_.nbytes(), 1),
                            own::ACL_MEM_MALLOC_HUGE_FIRST),
             "test allocation");
  }
  ~Block() {
    AclRuntime& rt = runtime();
    DeviceBinding bind(rt, buffer_.device);
    rt.fn().free(buffer_.data);
  }
  const NpuBuffer& buffer() const { return buffer_; }
  /// The block's bytes as a CPU tensor (a copy).
  at::Tensor read() const {
    return at::from_blob(buffer_.data, buffer_.sizes, at::TensorOptions(buffer_.dtype)).clone();
  }
  void write(const at::Tensor& values) {
    at::Tensor c = values.to(buffer_.dtype).contiguous();
    ASSERT_EQ(static_cast<size_t>(c.nbytes()), buffer_.nbytes());
    std::memcpy(buffer_.data, c.data_ptr(), c.nbytes());
  }

 private:
  NpuBuffer buffer_;
};

/// What must hold after every NPU operation, failed or not.
void expect_clean(long allocations_before, long objects_before) {
  EXPECT_EQ(fake_acl_live_allocations(), allocations_before) << fake_acl_calls();
  EXPECT_EQ(fake_acl_live_objects(), objects_before) << fake_acl_calls();
  EXPECT_EQ(fake_acl_pending_tasks(), 0);
  EXPECT_STREQ(fake_acl_violations(), "");
}

TEST(AclLibrary, SearchOrderFollowsSettingsThenEnvironmentThenStandardPaths) {
  if (dlopen("libascendcl.so", RTLD_NOW | RTLD_NOLOAD)) {
    GTEST_SKIP() << "ACL is already loaded in this process, the setting is frozen; run alone";
  }
  setenv("MODHOOKS_ACL_LIB_DIR", "/opt/explicit-env", 1);
  setenv("ASCEND_HOME_PATH", "/opt/home", 1);
  setenv("ASCEND_TOOLKIT_HOME", "/opt/toolkit", 1);
  modhooks::device::set_acl_library_path("/opt/setting");
  auto dirs = modhooks::device::acl_search_paths();
  unsetenv("MODHOOKS_ACL_LIB_DIR");
  unsetenv("ASCEND_HOME_PATH");
  unsetenv("ASCEND_TOOLKIT_HOME");
  modhooks::device::set_acl_library_path("");
  std::string arch = dirs.size() > 3 ? dirs[3].substr(10, dirs[3].find('/', 10) - 10) : "";
  std::vector<std::string> expected{"/opt/setting",
                                    "/opt/explicit-env",
                                    "/opt/home/lib64",
                                    "/opt/home/" + arch + "/lib64",
                                    "/opt/toolkit/lib64",
                                    "/opt/toolkit/" + arch + "/lib64",
                                    "/usr/local/Ascend/ascend-toolkit/latest/lib64",
                                    "/usr/local/Ascend/ascend-toolkit/latest/" + arch + "/lib64",
                                    "/usr/local/Ascend/cann/lib64",
                                    "/usr/local/Ascend/cann/" + arch + "/lib64"};
  EXPECT_EQ(dirs, expected);
  EXPECT_TRUE(arch == "x86_64-linux" || arch == "aarch64-linux") << arch;
}

TEST(AclLibrary, MissingRuntimeNamesEveryPlaceSearched) {
  if (dlopen("libascendcl.so", RTLD_NOW | RTLD_NOLOAD)) {
    GTEST_SKIP() << "an ACL runtime is already loaded in this process; run this test alone";
  }
  std::string msg = expect_error<modhooks::RuntimeError>(
      [] {
        AclRuntime({"/nonexistent/first", "/nonexistent/second"});
      },
      "device.acl.not_found");
  EXPECT_NE(msg.find("libascendcl.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/first: no libascendcl.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/second: no libascendcl.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set_acl_library_path"), std::string::npos) << msg;
}

TEST(AclLibrary, SettingThePathAfterLoadingIsAnError) {
  runtime();
  std::string msg = expect_error<modhooks::RuntimeError>(
      [] { modhooks::device::set_acl_library_path("/elsewhere"); }, "device.acl.already_loaded");
  EXPECT_NE(msg.find("already loaded from " FAKE_ACL_DIR), std::string::npos) << msg;
}

TEST(AclRuntime, LoadsFromTheSettingAndInitialisesOnce) {
  AclRuntime& rt = runtime();
  EXPECT_EQ(rt.directory(), FAKE_ACL_DIR);
  EXPECT_FALSE(rt.uses_torch_npu_stream());
  EXPECT_NE(rt.fn().destroy_executor, nullptr);
  // A second runtime finds ACL initialised (100002 from the fake) and accepts it.
  fake_acl_reset();
  AclRuntime again({FAKE_ACL_DIR});
  EXPECT_EQ(calls(), std::vector<std::string>{"aclInit"});
}

TEST(AclRuntime, InitToleratesAlreadyInitialisedAndNeverFinalizes) {
  runtime();
  fake_acl_reset();
  fake_acl_inject("aclInit", 100002, 1);
  {
    AclRuntime rt({FAKE_ACL_DIR});
    Block b({4}, at::kFloat);
    detail::npu_fill_zero(b.buffer());
  }
  EXPECT_EQ(count(calls(), "aclInit"), 1);
  EXPECT_EQ(count(calls(), "aclFinalize"), 0);
}

TEST(AclRuntime, InitFailureIsAClearError) {
  runtime();
  fake_acl_inject("aclInit", 507000, 1);
  std::string msg = expect_error<modhooks::RuntimeError>([] { AclRuntime({FAKE_ACL_DIR}); },
                                                         "device.acl.call_failed");
  EXPECT_NE(msg.find("ACL error 507000 (ACL_ERROR_RT_INTERNAL_ERROR) from aclInit"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("fake ACL: injected error 507000 in aclInit"), std::string::npos) << msg;
}

TEST(NpuOps, ZeroIsOneMemsetThenASynchronisation) {
  Block b({3, 5}, at::kFloat);
  b.write(at::ones({3, 5}));
  const long allocations = fake_acl_live_allocations();
  const long objects = fake_acl_live_objects();
  fake_acl_reset();
  detail::npu_fill_zero(b.buffer());
  EXPECT_TRUE(b.read().eq(0).all().item<bool>());
  auto names = calls();
  EXPECT_EQ(count(names, "aclrtMemsetAsync"), 1);
  EXPECT_LT(find(names, "aclrtMemsetAsync"), find(names, "aclrtSynchronizeStream"));
  EXPECT_NE(std::string(fake_acl_calls()).find("aclrtMemsetAsync 60 value=0"), std::string::npos);
  expect_clean(allocations, objects);
}

TEST(NpuOps, OwnedStreamIsCreatedOncePerDevice) {
  Block b({8}, at::kFloat);
  fake_acl_reset();
  detail::npu_fill_zero(b.buffer());
  const long streams = fake_acl_live_streams();
  detail::npu_fill_zero(b.buffer());
  EXPECT_LE(count(calls(), "aclrtCreateStream"), 1);
  EXPECT_EQ(fake_acl_live_streams(), streams);
}

TEST(NpuOps, MulComputesAndFreesItsWorkspaceAfterTheKernel) {
  Block src({2, 3}, at::kFloat), dst({2, 3}, at::kFloat);
  src.write(at::arange(6, at::kFloat).view({2, 3}));
  detail::npu_fill_zero(dst.buffer());  // creates the stream, so the sequence below is all Muls
  const long allocations = fake_acl_live_allocations();
  const long objects = fake_acl_live_objects();
  fake_acl_reset();
  detail::npu_mul(src.buffer(), 2.5, dst.buffer());
  EXPECT_TRUE(dst.read().equal(at::arange(6, at::kFloat).view({2, 3}) * 2.5)) << dst.read();
  auto names = calls();
  std::vector<std::string> expected{
      "aclrtGetDevice",   "aclCreateTensor",           "aclCreateTensor",
      "aclCreateScalar",  "aclnnMulsGetWorkspaceSize", "aclrtMalloc",
      "aclnnMuls",        "aclrtSynchronizeStream",    "aclrtFree",
      "aclDestroyScalar", "aclDestroyTensor",          "aclDestroyTensor"};
  EXPECT_EQ(names, expected) << fake_acl_calls();
  expect_clean(allocations, objects);
}

TEST(NpuOps, MulWithoutWorkspaceAllocatesNothing) {
  Block src({4}, at::kFloat), dst({4}, at::kFloat);
  src.write(at::ones({4}));
  fake_acl_reset();
  fake_acl_set_workspace_size(0);
  detail::npu_mul(src.buffer(), -3.0, dst.buffer());
  EXPECT_TRUE(dst.read().equal(at::full({4}, -3.0f)));
  EXPECT_EQ(count(calls(), "aclrtMalloc"), 0);
  EXPECT_EQ(count(calls(), "aclrtFree"), 0);
}

TEST(NpuOps, MulHandlesEveryFloatingDtype) {
  for (auto dtype : {at::kDouble, at::kHalf, at::kBFloat16}) {
    Block src({5}, dtype), dst({5}, dtype);
    src.write(at::arange(5, at::kFloat));
    detail::npu_mul(src.buffer(), 0.5, dst.buffer());
    EXPECT_TRUE(dst.read().to(at::kFloat).equal(at::arange(5, at::kFloat) * 0.5)) << dtype;
  }
}

TEST(NpuOps, MulRejectsIntegerTensors) {
  Block src({2}, at::kLong), dst({2}, at::kLong);
  std::string msg = expect_error<modhooks::RuntimeError>(
      [&] { detail::npu_mul(src.buffer(), 2.0, dst.buffer()); }, "device.npu.unsupported_dtype");
  EXPECT_NE(msg.find("float, half, bfloat16 and double tensors only, not Long"), std::string::npos)
      << msg;
}

TEST(NpuOps, CopyToHostWaitsForTheCopy) {
  Block src({6}, at::kFloat);
  src.write(at::arange(6, at::kFloat));
  at::Tensor host = at::zeros({6});
  fake_acl_reset();
  detail::npu_copy_to_host(src.buffer(), host.data_ptr());
  EXPECT_TRUE(host.equal(at::arange(6, at::kFloat)));
  EXPECT_LT(find(calls(), "aclrtMemcpyAsync"), find(calls(), "aclrtSynchronizeStream"));
}

struct Injection {
  const char* api;
  int error;
  const char* expected;  // in the message
};

TEST(NpuOps, EveryInjectedMulErrorIsClearAndLeaksNothing) {
  Block src({2, 2}, at::kFloat), dst({2, 2}, at::kFloat);
  src.write(at::ones({2, 2}));
  const std::vector<Injection> cases{
      {"aclrtGetDevice", 507000, nullptr},  // only asks; binding goes ahead
      {"aclCreateTensor", 1, "aclCreateTensor on npu:0 failed: fake ACL: injected error"},
      {"aclCreateScalar", 1, "aclCreateScalar on npu:0 failed: fake ACL: injected error"},
      {"aclnnMulsGetWorkspaceSize", 561000,
       "ACL error 561000 (ACLNN_ERR_INNER) from aclnnMulsGetWorkspaceSize on npu:0"},
      {"aclrtMalloc", 200000,
       "ACL error 200000 (ACL_ERROR_BAD_ALLOC) from aclrtMalloc of a 64-byte"},
      {"aclnnMuls", 507000, "ACL error 507000 (ACL_ERROR_RT_INTERNAL_ERROR) from aclnnMuls"},
      {"aclrtSynchronizeStream", 507000,
       "ACL error 507000 (ACL_ERROR_RT_INTERNAL_ERROR) from aclrtSynchronizeStream"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.api);
    const long allocations = fake_acl_live_allocations();
    const long objects = fake_acl_live_objects();
    fake_acl_reset();
    fake_acl_inject(c.api, c.error, 1);
    if (c.expected) {
      std::string msg = message_of<modhooks::RuntimeError>(
          [&] { detail::npu_mul(src.buffer(), 2.0, dst.buffer()); });
      EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("injected error ") + std::to_string(c.error) + " in " + c.api),
                std::string::npos)
          << msg;
    } else {
      detail::npu_mul(src.buffer(), 2.0, dst.buffer());
    }
    expect_clean(allocations, objects);
  }
  // The executor planned before the workspace allocation failed was handed back.
  fake_acl_reset();
  fake_acl_inject("aclrtMalloc", 200000, 1);
  message_of([&] { detail::npu_mul(src.buffer(), 2.0, dst.buffer()); });
  EXPECT_EQ(count(calls(), "aclDestroyAclOpExecutor"), 1);
}

TEST(NpuOps, InjectedZeroErrorsAreClear) {
  Block b({4}, at::kFloat);
  for (const char* api : {"aclrtMemsetAsync", "aclrtSynchronizeStream"}) {
    fake_acl_reset();
    fake_acl_inject(api, 507000, 1);
    std::string msg = expect_error<modhooks::RuntimeError>(
        [&] { detail::npu_fill_zero(b.buffer()); }, "device.acl.call_failed");
    EXPECT_NE(msg.find(std::string("ACL error 507000 (ACL_ERROR_RT_INTERNAL_ERROR) from ") + api +
                       " on npu:0: fake ACL: injected error 507000 in " + api),
              std::string::npos)
        << msg;
    EXPECT_EQ(fake_acl_pending_tasks(), 0);
    EXPECT_STREQ(fake_acl_violations(), "");
  }
}

TEST(DeviceBinding, WorkerThreadsBindTheDeviceThemselves) {
  Block b({4}, at::kFloat);
  b.write(at::ones({4}));
  fake_acl_reset();
  std::string error;
  std::thread worker([&] {
    try {
      detail::npu_fill_zero(b.buffer());
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  worker.join();
  EXPECT_EQ(error, "");
  EXPECT_TRUE(b.read().eq(0).all().item<bool>());
  auto names = calls();
  EXPECT_LT(find(names, "aclrtSetDevice"), find(names, "aclrtMemsetAsync")) << fake_acl_calls();
}

TEST(DeviceBinding, RestoresTheThreadsPreviousDevice) {
  Block b({4}, at::kFloat, /*device=*/0);
  std::thread worker([&] {
    AclRuntime& rt = runtime();
    rt.check(rt.fn().set_device(1), "test");
    detail::npu_fill_zero(b.buffer());
    int32_t current = -1;
    rt.check(rt.fn().get_device(&current), "test");
    EXPECT_EQ(current, 1);
  });
  worker.join();
}

TEST(DeviceBinding, BindingFailureIsAClearError) {
  Block b({4}, at::kFloat);
  fake_acl_reset();
  fake_acl_inject("aclrtSetDevice", 107001, 1);
  std::string msg;
  std::thread worker([&] { msg = message_of([&] { detail::npu_fill_zero(b.buffer()); }); });
  worker.join();
  EXPECT_NE(msg.find("ACL error 107001 (ACL_ERROR_RT_INVALID_DEVICEID) from aclrtSetDevice(0)"),
            std::string::npos)
      << msg;
}

// ---- The same through at::Tensor on the fake "npu" device (libtorch 2.4+) ----

class NpuTensor : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!fake_npu::enable(&why)) GTEST_SKIP() << why;
    runtime();
  }
  static at::Tensor npu(const at::Tensor& cpu) { return cpu.to(c10::Device("npu:0")); }
};

TEST_F(NpuTensor, BackendIsChosenByDevice) {
  EXPECT_STREQ(modhooks::device::backend_for(c10::Device("npu:0")).name(), "npu");
  EXPECT_STREQ(modhooks::device::backend_for(c10::Device("cpu")).name(), "aten");
}

TEST_F(NpuTensor, ZeroHookMemsetsEachGradientOnce) {
  torch::nn::Module m;
  std::vector<at::Tensor> grads{npu(at::ones({2, 3})), at::Tensor(), npu(at::ones({5}))};
  fake_acl_reset();
  auto out = modhooks::grad::zero()(m, grads);
  EXPECT_EQ(count(calls(), "aclrtMemsetAsync"), 2) << fake_acl_calls();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_FALSE((*out)[1].defined());
  EXPECT_EQ((*out)[0].device(), c10::Device("npu:0"));
  EXPECT_TRUE((*out)[0].cpu().equal(at::zeros({2, 3})));
  EXPECT_TRUE((*out)[2].cpu().equal(at::zeros({5})));
  EXPECT_TRUE(grads[0].cpu().equal(at::ones({2, 3}))) << "the hook wrote into its argument";
}

TEST_F(NpuTensor, ScaleHookRunsOnTheAutogradWorkerThroughAclnnMuls) {
  torch::nn::Module m;
  at::Tensor w = npu(at::ones({3, 2})).set_requires_grad(true);
  auto hook = modhooks::grad::scale(0.5);
  std::thread::id hook_thread;
  w.register_hook([&](const at::Tensor& g) {
    hook_thread = std::this_thread::get_id();
    return (*hook(m, {g}))[0];
  });
  fake_acl_reset();
  (w * 3).sum().backward();
  EXPECT_NE(hook_thread, std::this_thread::get_id()) << "expected autograd's device thread";
  EXPECT_EQ(count(calls(), "aclnnMuls"), 1) << fake_acl_calls();
  EXPECT_TRUE(w.grad().cpu().equal(at::full({3, 2}, 1.5f))) << w.grad().cpu();
  EXPECT_STREQ(fake_acl_violations(), "");
}

TEST_F(NpuTensor, ClipNormAndCheckFiniteReadThroughTheHost) {
  torch::nn::Module m;
  std::vector<at::Tensor> grads{npu(at::full({4}, 3.0f)), npu(at::full({4}, 4.0f))};  // norm 10
  fake_acl_reset();
  auto out = modhooks::grad::clip_norm(5.0)(m, grads);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(count(calls(), "aclrtMemcpyAsync"), 2);
  EXPECT_EQ(count(calls(), "aclnnMuls"), 2);
  EXPECT_TRUE((*out)[0].cpu().allclose(at::full({4}, 1.5f)));
  EXPECT_TRUE((*out)[1].cpu().allclose(at::full({4}, 2.0f)));

  grads[1] = npu(at::full({2}, NAN));
  std::string msg = expect_error<modhooks::RuntimeError>(
      [&] { modhooks::grad::check_finite()(m, grads); }, "device.grad.non_finite");
  EXPECT_NE(msg.find("grad_output[1] of module 'torch::nn::Module' holds NaN or Inf"),
            std::string::npos)
      << msg;
}

TEST_F(NpuTensor, NonContiguousGradientIsRejected) {
  torch::nn::Module m;
  at::Tensor g = npu(at::ones({2, 3})).t();
  std::string msg = message_of<modhooks::RuntimeError>([&] { modhooks::grad::scale(2.0)(m, {g}); });
  EXPECT_NE(msg.find("needs contiguous tensors in a base format"), std::string::npos) << msg;
  EXPECT_NE(msg.find("strides [1, 3]"), std::string::npos) << msg;
}

TEST_F(NpuTensor, ZeroSizedGradientsNeedNoAcl) {
  torch::nn::Module m;
  at::Tensor g = npu(at::ones({0, 3}));
  fake_acl_reset();
  auto out = modhooks::grad::zero()(m, {g});
  EXPECT_EQ((*out)[0].sizes(), g.sizes());
  EXPECT_EQ(count(calls(), "aclrtMemsetAsync"), 0);
}

}  // namespace
