// SPDX-License-Identifier: BSD-3-Clause
// modhooks/aoti.h: hooks inside AOTInductor packages exported by modhooks.export, against
// Python eager's hooks on the same weights (tests/python/aoti_packages.py writes both). The
// tests every compiled kind passes are in point_tests.h; those of packages alone are here.
#include "modhooks/aoti.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "point_tests.h"
#include "test_util.h"

namespace {

using point_tests::Case;
using point_tests::expect_close;
using point_tests::expect_eager;
using point_tests::expect_replacement;
using point_tests::Firing;
using point_tests::record_all;

/// The fixture's folder: MODHOOKS_AOTI_PACKAGES in the environment (the GPU machine's check
/// writes its CUDA package elsewhere), else the one the build names.
std::string folder() {
  const char* dir = std::getenv("MODHOOKS_AOTI_PACKAGES");
  return dir ? dir : MODHOOKS_AOTI_PACKAGES;
}

std::string package(const std::string& name) { return folder() + "/" + name; }

/// AOTInductor packages, for point_tests.h.
struct AotiKind {
  using Net = modhooks::aoti::Model;
  using Point = modhooks::aoti::Point;
  static std::string folder() { return ::folder(); }
  static std::string extension() { return ".pt2"; }
  static std::string file(const std::string& name) { return package(name + extension()); }
  static std::string id(const std::string& what) { return "aoti." + what; }
  static std::string file_id(const std::string& what) { return "aoti.package." + what; }
  /// Two runners, so that two threads run at once.
  static std::unique_ptr<Net> serving_threads(const std::string& path) {
    return std::make_unique<Net>(path, /*num_runners=*/2);
  }
};

}  // namespace

namespace point_tests {
INSTANTIATE_TYPED_TEST_SUITE_P(Aoti, Points, AotiKind);
}  // namespace point_tests

namespace {

TEST(AotiModel, MetadataHasTheAbi) {
  modhooks::aoti::Model net(package("branchy.pt2"));
  EXPECT_EQ(net.metadata().at("modhooks.abi"), "0.1");
}

TEST(AotiModel, AFileThatIsNoZipIsNoPackage) {
  EXPECT_ERROR(modhooks::aoti::Model(package("branchy.json")), FormatError,
               "aoti.package.not_a_package");
}

TEST(AotiModel, RefusesBeforeLoadingTheCompiledLibrary) {
  // Each package's library is cut short: a check made after loading it would see unloadable.
  EXPECT_ERROR_WITH(modhooks::aoti::Model(package("other_abi_broken_library.pt2")), RuntimeError,
                    "aoti.package.abi_mismatch", "exported for the modhooks ABI 9.9");
  if (at::hasCUDA()) GTEST_SKIP() << "this process has CUDA";
  EXPECT_ERROR_WITH(modhooks::aoti::Model(package("cuda_device_broken_library.pt2")), RuntimeError,
                    "aoti.package.cuda_unavailable", "was compiled for CUDA");
}

TEST(AotiEager, Bert) { expect_eager<AotiKind>("bert"); }
TEST(AotiEager, DynamicBatch) { expect_eager<AotiKind>("dynamic", 3); }
TEST(AotiReplace, Bert) { expect_replacement<AotiKind>("bert"); }
TEST(AotiReplace, DynamicBatch) { expect_replacement<AotiKind>("dynamic"); }

TEST(AotiErrors, NoRunnersIsAnError) {
  EXPECT_ERROR(modhooks::aoti::Model(package("branchy.pt2"), 0), ValueError,
               "aoti.model.num_runners");
}

// With two runners a hook's nested run of its own model takes the second one.
TEST(AotiErrors, AHookRunsItsOwnModelOnASecondRunner) {
  Case<AotiKind> c("branchy");
  modhooks::aoti::Model two(c.path, /*num_runners=*/2);
  int firings = 0;
  auto h2 = modhooks::register_forward_hook(
      two.point("relu"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (firings++ == 0) expect_close(two.run(c.inputs()), c.outputs(), "the nested run");
      });
  expect_close(two.run(c.inputs()), c.outputs(), "the outer run");
  const auto order = c.order();
  EXPECT_EQ(firings, 2 * std::count(order.begin(), order.end(), "relu"));  // two runs
}

// The GPU machine's check (scripts/device-check.sh) writes this package with
// `aoti_packages.py <dir> --cuda`; elsewhere there is none and the case skips.
TEST(AotiCuda, PackageCompiledForCudaFiresHooksOnDeviceTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!std::ifstream(package("branchy_cuda.pt2"))) {
    GTEST_SKIP() << "no CUDA package: run tests/python/aoti_packages.py <dir> --cuda";
  }
  Case<AotiKind> c("branchy_cuda");
  modhooks::aoti::Model net(c.path);
  std::vector<Firing> log;
  auto handles = record_all(net, log);
  std::vector<c10::Device> devices;
  auto pre = modhooks::register_forward_pre_hook(
      net.point("a"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args) {
        devices.push_back(args[0].toTensor().device());
      });
  auto out = net.run(c.inputs());
  ASSERT_EQ(log.size(), c.order().size());
  for (std::size_t n = 0; n < log.size(); ++n) {
    EXPECT_EQ(log[n].name, c.order()[n]);
    EXPECT_TRUE(log[n].tensors[0].is_cuda()) << log[n].name;
    expect_close(log[n].tensors, c.fired(static_cast<int>(n)), "cuda firing " + log[n].name);
  }
  ASSERT_EQ(devices.size(), 1U);
  EXPECT_TRUE(devices[0].is_cuda());
  expect_close(out, c.outputs(), "cuda outputs");
  expect_replacement<AotiKind>("branchy_cuda");
}

TEST(AotiErrors, WrongInputsAreARuntimeError) {
  modhooks::aoti::Model net(package("branchy.pt2"));
  EXPECT_ERROR(net.run({}), RuntimeError, "aoti.model.run_failed");
}

}  // namespace
