// SPDX-License-Identifier: BSD-3-Clause
// modhooks/executorch.h: hooks inside ExecuTorch programs exported by modhooks.export and written
// by modhooks.export.to_executorch, against Python eager's hooks on the same weights
// (tests/python/executorch_programs.py writes both). The tests every compiled kind passes are in
// point_tests.h; those of programs alone are here.
#include "modhooks/executorch.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

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

std::string program(const std::string& name) {
  return std::string(MODHOOKS_EXECUTORCH_PROGRAMS) + "/" + name;
}

/// ExecuTorch programs, for point_tests.h.
struct EtKind {
  using Net = modhooks::executorch::Program;
  using Point = modhooks::executorch::Point;
  static std::string folder() { return MODHOOKS_EXECUTORCH_PROGRAMS; }
  static std::string extension() { return ".pte"; }
  static std::string file(const std::string& name) { return program(name + extension()); }
  /// "model.X" is the program's "program.X"; the points' ids are aoti's, under "executorch.".
  static std::string id(const std::string& what) {
    return "executorch." + (what.rfind("model.", 0) == 0 ? "program." + what.substr(6) : what);
  }
  static std::string file_id(const std::string& what) { return "executorch.program." + what; }
  /// A program serves threads one run at a time.
  static std::unique_ptr<Net> serving_threads(const std::string& path) {
    return std::make_unique<Net>(path);
  }
};

}  // namespace

namespace point_tests {
INSTANTIATE_TYPED_TEST_SUITE_P(Executorch, Points, EtKind);
}  // namespace point_tests

namespace {

TEST(ExecutorchProgram, AFileExecuTorchCannotLoadIsUnloadable) {
  EXPECT_ERROR(modhooks::executorch::Program(program("not_a_program.pte")), FormatError,
               "executorch.program.unloadable");
  EXPECT_ERROR(modhooks::executorch::Program(program("truncated.pte")), FormatError,
               "executorch.program.unloadable");
}

TEST(ExecutorchProgram, WrongInputsAreAValueErrorAndTheProgramStaysUsable) {
  Case<EtKind> c("branchy");
  modhooks::executorch::Program net(c.path);
  EXPECT_ERROR_WITH(net.run({}), ValueError, "executorch.program.bad_inputs",
                    "it takes 1 input(s), got 0");
  EXPECT_ERROR_WITH(net.run({c.inputs()[0].to(at::kDouble)}), ValueError,
                    "executorch.program.bad_inputs", "input 0 is Double on cpu");
  EXPECT_ERROR(net.run({at::randn({3, 8})}), RuntimeError, "executorch.program.run_failed");
  expect_close(net.run(c.inputs()), c.outputs(), "after the refused runs");
}

TEST(ExecutorchEager, DynamicBatch) { expect_eager<EtKind>("dynamic", 3); }
TEST(ExecutorchReplace, DynamicBatch) { expect_replacement<EtKind>("dynamic"); }
TEST(ExecutorchEager, MobileNetV3SmallEverySubmodule) {
  expect_eager<EtKind>("mobilenet_v3_small");
}
TEST(ExecutorchReplace, MobileNetV3Small) { expect_replacement<EtKind>("mobilenet_v3_small"); }

// With the XNNPACK partitioner the points split the delegated partitions: every point still fires
// in eager's order with eager's tensors (within float tolerance), a replacement acts as in eager,
// and with no hooks the outputs are bitwise those of the XNNPACK program without points.
TEST(ExecutorchXnnpack, EveryPointFiresOutsideTheDelegates) {
  expect_eager<EtKind>("resnet18_blocks_xnnpack");
}
TEST(ExecutorchXnnpack, Replacement) { expect_replacement<EtKind>("resnet18_blocks_xnnpack"); }
TEST(ExecutorchXnnpack, NoHooksBitwiseEqualToTheProgramWithoutPoints) {
  Case<EtKind> c("resnet18_blocks_xnnpack");
  modhooks::executorch::Program hooked(c.path);
  modhooks::executorch::Program plain(EtKind::file("resnet18_blocks_xnnpack.plain"));
  auto a = hooked.run(c.inputs());
  auto b = plain.run(c.inputs());
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << i;
}

}  // namespace
