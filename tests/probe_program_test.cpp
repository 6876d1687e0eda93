// SPDX-License-Identifier: BSD-3-Clause
// modhooks::probe on the points of a compiled program: an AOTInductor package
// (MODHOOKS_PROBE_AOTI, test probe_aoti_test) or an ExecuTorch program (test
// probe_executorch_test), the same source. msprobe is the oracle: tests/python/probe_oracle.py
// exports its model "program" with hook points and compiles it once (`program`), runs msprobe's
// own forward-only dump of the eager model with the same weights and inputs (`infer`), and
// msprobe's compare must match every row of the C++ run's dump and pass it.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <sys/wait.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/modhooks.h"
#include "modhooks/probe.h"
#include "probe_files.h"
#if MODHOOKS_PROBE_AOTI
#include "modhooks/aoti.h"
// The suites' names, one per program kind, so that ctest's names stay apart.
#define PROBE_PROGRAM ProbeAoti
#define PROBE_PROGRAM_AGAINST ProbeAotiAgainstMsprobe
#define PROBE_KIND "aoti"
#else
#include "modhooks/executorch.h"
#define PROBE_PROGRAM ProbeExecutorch
#define PROBE_PROGRAM_AGAINST ProbeExecutorchAgainstMsprobe
#define PROBE_KIND "executorch"
#endif
// GoogleTest's macros paste and quote their suite's name: these expand it first.
#define PROBE_TEST(suite, name) TEST(suite, name)
#define PROBE_TEST_P(suite, name) TEST_P(suite, name)
#define PROBE_INSTANTIATE(prefix, suite, ...) INSTANTIATE_TEST_SUITE_P(prefix, suite, __VA_ARGS__)

namespace mp = modhooks::probe;
namespace fs = std::filesystem;

namespace {

using probe_files::read_json;
using probe_files::run;
using probe_files::step_folder;

#if MODHOOKS_PROBE_AOTI
using Program = modhooks::aoti::Model;
const std::string kProgram = std::string(MODHOOKS_PROBE_PROGRAMS) + "/program.pt2";
#else
using Program = modhooks::executorch::Program;
const std::string kProgram = std::string(MODHOOKS_PROBE_PROGRAMS) + "/program.pte";
#endif
using Point = std::decay_t<decltype(std::declval<const Program&>().point(""))>;
const std::string kPrograms = MODHOOKS_PROBE_PROGRAMS;
const std::string kOracle = std::string(MODHOOKS_TEST_SOURCE_DIR) + "/python/probe_oracle.py";

/// The one process folder (proc<pid>) of a step.
std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "probe_" PROBE_KIND "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// probe_oracle.py's `infer` run in C++: the compiled program run once a step on that step's
/// input, with the debugger started on it.
void infer(mp::PrecisionDebugger& debugger) {
  Program program(kProgram);
  const c10::IValue inputs = modhooks::load_object(kPrograms + "/program_inputs.pt");
  for (int step = 0; step < 2; ++step) {
    debugger.start(program);
    program.run({inputs.toGenericDict().at("x" + std::to_string(step)).toTensor()});
    debugger.stop();
    debugger.step();
  }
}

std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

}  // namespace

// ---- against msprobe

/// task, summary_mode
using Variant = std::tuple<std::string, std::string>;

class PROBE_PROGRAM_AGAINST : public ::testing::TestWithParam<Variant> {};

PROBE_TEST_P(PROBE_PROGRAM_AGAINST, CompareMatchesAndPassesEveryRow) {
  const auto& [task, summary_mode] = GetParam();
  const std::string dir = fresh_dir(task + "_" + summary_mode);
  const std::string config_path =
      probe_files::write_config(dir + "/config.json", dir + "/python", task, summary_mode);
  const auto [golden_status, golden_log] = run(std::string(MODHOOKS_PYTHON) + " " + kOracle +
                                               " infer " + kPrograms + " program " + config_path);
  if (golden_status == 77) GTEST_SKIP() << "msprobe is not installed: " << golden_log;
  ASSERT_EQ(golden_status, 0) << golden_log;

  mp::Config config = mp::Config::from_file(config_path);
  config.dump_path = dir + "/cpp";
  {
    mp::PrecisionDebugger debugger(config);
    infer(debugger);
  }
  // compare's rows are the C++ run's: every one matched (the Python run's parameter rows, the
  // output of `block.act` and the inputs of `seq.1`, which the program does not show, have
  // none) and passed; with md5,
  // every CRC equal. The oracle also checks that both dumps hold the same entries in order.
  const auto [status, log] =
      probe_files::compare_steps(MODHOOKS_PYTHON, kOracle, libtorch_version(), dir, 2);
  if (status == 77) GTEST_SKIP() << "msprobe is not installed: " << log;
  EXPECT_EQ(status, 0) << log;
  std::cout << log.substr(log.rfind("== ")) << "\n";
}

// md5 compares bits. An AOTInductor package runs ATen's kernels for these modules (its matmuls
// are extern calls) and its CRCs are eager's; ExecuTorch's own kernels (its linear) round
// otherwise, so every tensor computed after the first Linear has another CRC, and only the
// statistics (with compare's tolerances) and the tensors (its Cosine and error ratios) compare.
namespace {
std::vector<Variant> variants() {
  std::vector<Variant> all = {{"statistics", "statistics"}, {"tensor", ""}};
#if MODHOOKS_PROBE_AOTI
  all.emplace_back("statistics", "md5");
#endif
  return all;
}
}  // namespace

PROBE_INSTANTIATE(, PROBE_PROGRAM_AGAINST, ::testing::ValuesIn(variants()),
                  [](const ::testing::TestParamInfo<Variant>& info) {
                    return std::get<0>(info.param) +
                           (std::get<1>(info.param).empty() ? "" : "_" + std::get<1>(info.param));
                  });

// ---- the format, without msprobe

PROBE_TEST(PROBE_PROGRAM, ForwardEntriesOnlyWithWhatAPointShows) {
  const std::string dir = fresh_dir("entries");
  mp::Config config;
  config.level = "L0";
  config.dump_path = dir;
  {
    mp::PrecisionDebugger debugger(config);
    infer(debugger);
  }
  for (int step = 0; step < 2; ++step) {
    const std::string folder = step_folder(dir, step);
    const auto data = read_json(folder + "/dump.json")["data"];
    std::vector<std::string> names;
    for (const auto& item : data.items()) names.push_back(item.key());
    // msprobe's names for the eager model's modules, children before parents; no backward and
    // no parameters_grad entries: a program runs forward only.
    const std::vector<std::string> expected = {
        "Module.shared.Linear.forward.0",  "Module.block.fc.Linear.forward.0",
        "Module.block.act.Tanh.forward.0", "Module.block.Block.forward.0",
        "Module.shared.Linear.forward.1",  "Module.pair.Pair.forward.0",
        "Module.seq.0.Linear.forward.0",   "Module.seq.1.ReLU.forward.0",
        "Module.seq.Sequential.forward.0"};
    EXPECT_EQ(names, expected) << "step " << step;
    for (const auto& item : data.items()) {
      const std::string& name = item.key();
      const auto& record = item.value();
      // A point shows none of its module's tensors: no "parameters" (not an empty one).
      EXPECT_FALSE(record.contains("parameters")) << name;
      // `block.act`'s output was not exported as a point: its record has its inputs only.
      if (name == "Module.block.act.Tanh.forward.0") {
        EXPECT_FALSE(record.contains("output"));
      } else {
        ASSERT_TRUE(record.contains("output")) << name;
        EXPECT_EQ(record["output"].size(), name == "Module.pair.Pair.forward.0" ? 2U : 1U) << name;
        EXPECT_EQ(record["output"][0]["requires_grad"], false) << name;
      }
      // `seq.1`'s inputs were not exported as a point: its record has its output only.
      if (name == "Module.seq.1.ReLU.forward.0") {
        EXPECT_FALSE(record.contains("input_args"));
        EXPECT_FALSE(record.contains("input_kwargs"));
      } else {
        ASSERT_TRUE(record.contains("input_args")) << name;
        EXPECT_EQ(record["input_args"].size(), 1U) << name;
        EXPECT_EQ(record["input_args"][0]["shape"], nlohmann::ordered_json::array({5, 3})) << name;
        EXPECT_EQ(record["input_kwargs"], nlohmann::ordered_json::object()) << name;
      }
    }
    // The forward of `shared`'s second call takes the first's output through block.
    EXPECT_EQ(data["Module.shared.Linear.forward.1"]["input_args"][0]["Max"],
              data["Module.block.Block.forward.0"]["output"][0]["Max"]);
    const auto construct = read_json(folder + "/construct.json");
    EXPECT_EQ(construct["Module.block.fc.Linear.forward.0"], "Module.block.Block.forward.0");
    EXPECT_EQ(construct["Module.block.act.Tanh.forward.0"], "Module.block.Block.forward.0");
    EXPECT_TRUE(construct["Module.pair.Pair.forward.0"].is_null());  // block.act was ended
    EXPECT_EQ(construct["Module.seq.1.ReLU.forward.0"], "Module.seq.Sequential.forward.0");
    EXPECT_TRUE(construct["Module.shared.Linear.forward.1"].is_null());
  }
}

PROBE_TEST(PROBE_PROGRAM, StopRemovesTheHooksAndTheProgramRunsOn) {
  const std::string dir = fresh_dir("stop");
  mp::Config config;
  config.level = "L0";
  config.dump_path = dir;
  Program program(kProgram);
  const at::Tensor x =
      modhooks::load_object(kPrograms + "/program_inputs.pt").toGenericDict().at("x0").toTensor();
  const at::Tensor plain = program.run({x})[0];
  {
    mp::PrecisionDebugger debugger(config);
    debugger.start(program);
    EXPECT_TRUE(program.run({x})[0].equal(plain));  // the debugger changes no value
    debugger.stop();
    program.run({x});  // not recorded
    debugger.step();
  }
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  EXPECT_EQ(data.size(), 9U);
  EXPECT_FALSE(data.contains("Module.shared.Linear.forward.2"));
  // The user's own hook after the debugger is gone still fires, and only it.
  int fired = 0;
  auto handle = modhooks::register_forward_hook(
      program.point("seq"),
      [&fired](const Point& /*point*/, const std::vector<c10::IValue>& /*args*/,
               const c10::IValue& /*output*/) { ++fired; });
  program.run({x});
  EXPECT_EQ(fired, 1);
  handle.remove();
}

PROBE_TEST(PROBE_PROGRAM, DumpsWhatTheModuleReturnedBeforeTheUsersHooks) {
  // msprobe puts its pre-hook after the module's own and its forward hook before them: with a
  // user's pre-hook that doubles `seq`'s input and a forward hook that doubles its output, the
  // dump shows what `seq` received and what it returned, not what its caller receives.
  const std::string dir = fresh_dir("order");
  Program program(kProgram);
  const at::Tensor x =
      modhooks::load_object(kPrograms + "/program_inputs.pt").toGenericDict().at("x0").toTensor();
  at::Tensor returned;
  const auto dump = [&](const std::string& name) {
    mp::Config config;
    config.level = "L0";
    config.dump_path = dir + "/" + name;
    {
      mp::PrecisionDebugger debugger(config);
      debugger.start(program);
      returned = program.run({x})[0];
      debugger.stop();
      debugger.step();
    }
    return read_json(step_folder(dir + "/" + name, 0) +
                     "/dump.json")["data"]["Module.seq.Sequential.forward.0"];
  };
  const auto plain = dump("plain");
  auto pre = modhooks::register_forward_pre_hook(
      program.point("seq"),
      [](const Point& /*point*/,
         const std::vector<c10::IValue>& args) -> std::optional<std::vector<c10::IValue>> {
        return std::vector<c10::IValue>{args[0].toTensor() * 2};
      });
  auto post = modhooks::register_forward_hook(
      program.point("seq"),
      [](const Point& /*point*/, const std::vector<c10::IValue>& /*args*/,
         const c10::IValue& output) -> std::optional<c10::IValue> {
        return output.toTensor() * 2;
      });
  const auto hooked = dump("hooked");
  pre.remove();
  post.remove();
  EXPECT_EQ(hooked["input_args"][0]["Max"], plain["input_args"][0]["Max"].get<double>() * 2);
  EXPECT_EQ(hooked["output"][0]["Max"].get<double>() * 2, returned.max().item<double>());
}
