// SPDX-License-Identifier: BSD-3-Clause
// modhooks::probe::Config: msprobe's config.json, its keys and task sections; what it refuses,
// naming the key, before anything runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "modhooks/core/error.h"
#include "modhooks/probe/config.h"

namespace mp = modhooks::probe;

namespace {

/// The error `text` raises, as "id: message".
template <class E = modhooks::Error>
std::string error_of(const std::string& text) {
  try {
    mp::Config::from_json(text);
  } catch (const E& e) {
    return std::string(e.id()) + ": " + e.what();
  }
  return "no error";
}

}  // namespace

TEST(ProbeConfig, DefaultsAreMsprobes) {
  const mp::Config config;
  EXPECT_EQ(config.task, "statistics");
  EXPECT_EQ(config.level, "L1");
  EXPECT_EQ(config.dump_path, "./dump_path");
  EXPECT_EQ(config.summary_mode, "statistics");
  EXPECT_EQ(config.data_mode, std::vector<std::string>{"all"});
  EXPECT_TRUE(config.step.empty());
  EXPECT_TRUE(config.rank.empty());
  EXPECT_TRUE(config.extra_info);
}

TEST(ProbeConfig, ReadsTheTasksSection) {
  const mp::Config config = mp::Config::from_json(R"({
    "task": "statistics", "dump_path": "out", "rank": [1, "3-4"], "step": [0, 2],
    "level": "L0", "async_dump": false, "extra_info": false,
    "statistics": {"scope": [], "list": ["fc1"], "data_mode": ["forward"], "summary_mode": "md5"},
    "tensor": {"scope": [], "list": ["ignored"], "data_mode": ["all"]},
    "acc_check": {"white_list": []}})");
  EXPECT_EQ(config.task, "statistics");
  EXPECT_EQ(config.dump_path, "out");
  EXPECT_EQ(config.rank, (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(config.step, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(config.level, "L0");
  EXPECT_FALSE(config.extra_info);
  EXPECT_EQ(config.list, std::vector<std::string>{"fc1"});  // statistics', not tensor's
  EXPECT_EQ(config.data_mode, std::vector<std::string>{"forward"});
  EXPECT_EQ(config.summary_mode, "md5");
}

TEST(ProbeConfig, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "probe_config.json";
  std::ofstream(path) << R"({"task": "tensor", "level": "L0", "dump_path": "d",
                            "tensor": {"scope": ["Module.a.Linear.forward.0",
                                                 "Module.b.Linear.forward.0"]}})";
  const mp::Config config = mp::Config::from_file(path);
  EXPECT_EQ(config.task, "tensor");
  EXPECT_EQ(config.scope.size(), 2U);
  std::remove(path.c_str());
}

TEST(ProbeConfig, UnknownKeysAreNamed) {
  EXPECT_EQ(error_of<modhooks::KeyError>(R"({"level": "L0", "dump_pth": "x"})"),
            "probe.config.unknown_key: msprobe config: unknown key 'dump_pth'");
  EXPECT_EQ(error_of<modhooks::KeyError>(
                R"({"level": "L0", "task": "tensor", "tensor": {"summary_mode": "md5"}})"),
            "probe.config.unknown_key: msprobe config: unknown key 'tensor.summary_mode' "
            "(modhooks reads scope, list, data_mode)");
}

TEST(ProbeConfig, WrongTypesAreNamed) {
  EXPECT_EQ(error_of<modhooks::TypeError>(R"({"level": "L0", "step": "0"})"),
            "probe.config.wrong_type: msprobe config: 'step' must be a list of ints or \"a-b\" "
            "ranges");
  EXPECT_EQ(error_of<modhooks::TypeError>(R"({"level": "L0", "statistics": {"list": "fc"}})"),
            "probe.config.wrong_type: msprobe config: 'statistics.list' must be a list of strings");
  EXPECT_EQ(error_of<modhooks::TypeError>(R"({"level": "L0", "async_dump": 1})"),
            "probe.config.wrong_type: msprobe config: 'async_dump' must be true or false");
  EXPECT_EQ(error_of<modhooks::TypeError>(R"({"level": 0})"),
            "probe.config.wrong_type: msprobe config: 'level' must be a string");
}

TEST(ProbeConfig, ValuesModhooksCannotDumpAreRefused) {
  EXPECT_EQ(error_of<modhooks::ValueError>(R"({"dump_path": "d"})"),
            "probe.config.invalid_value: msprobe config: 'level' is 'L1': modhooks::probe dumps "
            "level \"L0\" (modules) only; msprobe's default \"L1\" names Python's API calls, "
            "which a C++ run cannot match");
  EXPECT_EQ(error_of<modhooks::ValueError>(R"({"level": "L0", "task": "acc_check"})"),
            "probe.config.invalid_value: msprobe config: 'task' is 'acc_check': modhooks::probe "
            "dumps the tasks \"statistics\" and \"tensor\"");
  EXPECT_EQ(
      error_of<modhooks::ValueError>(R"({"level": "L0", "statistics": {"summary_mode": "xor"}})"),
      "probe.config.invalid_value: msprobe config: 'statistics.summary_mode' is 'xor': "
      "\"statistics\" or \"md5\"");
  EXPECT_EQ(
      error_of<modhooks::ValueError>(R"({"level": "L0", "statistics": {"data_mode": ["inputs"]}})"),
      "probe.config.invalid_value: msprobe config: 'statistics.data_mode' holds 'inputs': "
      "\"all\", \"forward\", \"backward\", \"input\", \"output\"");
  EXPECT_EQ(error_of<modhooks::ValueError>(
                R"({"level": "L0", "statistics": {"scope": ["Module.a.Linear.forward.0"]}})"),
            "probe.config.invalid_value: msprobe config: 'statistics.scope' must name two "
            "entries, the first and the last to dump");
  EXPECT_EQ(error_of<modhooks::ValueError>(R"({"level": "L0", "load": {}})"),
            "probe.config.unsupported: msprobe config: 'load' is not supported by "
            "modhooks::probe");
}

TEST(ProbeConfig, AFileThatIsNotJsonNamesItsPath) {
  const std::string path = ::testing::TempDir() + "probe_bad.json";
  std::ofstream(path) << "{\"level\": ";
  try {
    mp::Config::from_file(path);
    FAIL() << "no error";
  } catch (const modhooks::FormatError& e) {
    EXPECT_EQ(std::string(e.id()), "probe.config.parse");
    EXPECT_NE(std::string(e.what()).find(path + ": msprobe config: not JSON"), std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}
