// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the probe tests share: msprobe's config, running the Python oracle, and reading the dumps
// they compare.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

namespace probe_files {

/// Runs `command`; its exit status and what it printed.
inline std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A dump.json as nlohmann reads it: Python's NaN and Infinity tokens, which it does not take,
/// read as null (the tests that need them look at the text).
inline nlohmann::ordered_json read_json(const std::string& path) {
  std::string text = read_text(path);
  for (const std::string token : {"-Infinity", "Infinity", "NaN"}) {
    for (auto at = text.find(": " + token); at != std::string::npos;
         at = text.find(": " + token, at)) {
      text.replace(at + 2, token.size(), "null");
    }
  }
  return nlohmann::ordered_json::parse(text);
}

/// The one process folder (proc<pid> or rank<R>) of a step.
inline std::string step_folder(const std::string& dump_path, int step) {
  const std::filesystem::path step_dir =
      std::filesystem::path(dump_path) / ("step" + std::to_string(step));
  for (const auto& entry : std::filesystem::directory_iterator(step_dir)) {
    return entry.path().string();
  }
  return "";
}

/// msprobe's config.json for `task` (and `summary_mode`), dumping to `dump_path`; its path.
inline std::string write_config(const std::string& path, const std::string& dump_path,
                                const std::string& task, const std::string& summary_mode) {
  const std::string section =
      "{\"scope\": [], \"list\": [], \"data_mode\": [\"all\"]" +
      (task == "statistics" ? ", \"summary_mode\": \"" + summary_mode + "\"" : std::string()) + "}";
  std::ofstream(path) << "{\"task\": \"" + task + "\", \"dump_path\": \"" + dump_path +
                             "\", \"rank\": [], \"step\": [], \"level\": \"L0\", "
                             "\"async_dump\": false, \"" +
                             task + "\": " + section + "}";
  return path;
}

/// msprobe's compare, through the oracle `python oracle compare ...`, of the C++ dump under
/// `dir`/cpp against the Python dump under `dir`/python, step by step; its exit status (77:
/// msprobe is not installed) and what it printed.
inline std::pair<int, std::string> compare_steps(const std::string& python,
                                                 const std::string& oracle,
                                                 const std::string& libtorch,
                                                 const std::string& dir, int steps) {
  std::string pairs;
  for (int step = 0; step < steps; ++step) {
    pairs += " " + step_folder(dir + "/cpp", step) + "/dump.json " +
             step_folder(dir + "/python", step) + "/dump.json";
  }
  return run(python + " " + oracle + " compare " + libtorch + " " + dir + pairs);
}

}  // namespace probe_files
