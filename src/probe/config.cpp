// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/probe/config.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace {

using modhooks::detail::fail;
using Json = nlohmann::json;

[[noreturn]] void wrong_type(const std::string& key, const char* expected) {
  fail<TypeError>("probe.config.wrong_type", "msprobe config: '" + key + "' must be " + expected);
}

std::string get_string(const Json& value, const std::string& key) {
  if (!value.is_string()) wrong_type(key, "a string");
  return value.get<std::string>();
}

bool get_bool(const Json& value, const std::string& key) {
  if (!value.is_boolean()) wrong_type(key, "true or false");
  return value.get<bool>();
}

std::vector<std::string> get_strings(const Json& value, const std::string& key) {
  if (value.is_null()) return {};
  if (!value.is_array()) wrong_type(key, "a list of strings");
  std::vector<std::string> out;
  for (const Json& item : value) {
    if (!item.is_string()) wrong_type(key, "a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

/// msprobe's step and rank lists: ints, or "a-b" strings for a range.
std::vector<int64_t> get_indices(const Json& value, const std::string& key) {
  if (value.is_null()) return {};
  if (!value.is_array()) wrong_type(key, "a list of ints or \"a-b\" ranges");
  std::vector<int64_t> out;
  static const std::regex range(R"(^(\d+)-(\d+)$)");
  for (const Json& item : value) {
    if (item.is_number_integer() && item.get<int64_t>() >= 0) {
      out.push_back(item.get<int64_t>());
      continue;
    }
    std::smatch match;
    std::string text = item.is_string() ? item.get<std::string>() : std::string();
    if (!std::regex_match(text, match, range)) {
      wrong_type(key, "a list of ints >= 0 or \"a-b\" ranges");
    }
    const int64_t first = std::stoll(match[1]);
    const int64_t last = std::stoll(match[2]);
    if (first > last) wrong_type(key, "a list of ranges \"a-b\" with a <= b");
    for (int64_t i = first; i <= last; ++i) out.push_back(i);
  }
  return out;
}

/// The task sections msprobe 26.2.0 knows, which a config may carry for other tasks.
const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {
      "tensor",         "statistics", "acc_check",      "structure",      "diff_check",
      "exception_dump", "nan_check",  "overflow_check", "free_benchmark", "grad_probe"};
  return names;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

void read_section(const Json& section, const std::string& name, Config& config) {
  if (!section.is_object()) wrong_type(name, "an object");
  for (const auto& [key, value] : section.items()) {
    const std::string where = name + "." + key;
    if (key == "scope") {
      // msprobe takes a single string as a one-item list.
      config.scope = value.is_string() ? std::vector<std::string>{value.get<std::string>()}
                                       : get_strings(value, where);
    } else if (key == "list") {
      config.list = get_strings(value, where);
    } else if (key == "data_mode") {
      config.data_mode = get_strings(value, where);
      if (config.data_mode.empty()) config.data_mode = {"all"};
    } else if (key == "summary_mode" && name == "statistics") {
      config.summary_mode = get_string(value, where);
    } else {
      fail<KeyError>("probe.config.unknown_key",
                     "msprobe config: unknown key '" + where +
                         "' (modhooks reads scope, list, "
                         "data_mode" +
                         std::string(name == "statistics" ? ", summary_mode" : "") + ")");
    }
  }
}

}  // namespace

Config Config::from_json(const std::string& text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail<FormatError>("probe.config.parse", std::string("msprobe config: not JSON: ") + e.what());
  }
  if (!root.is_object()) wrong_type("(the file)", "a JSON object");
  Config config;
  // The task first: its section is read, the other tasks' sections are only checked for type.
  if (root.contains("task")) config.task = get_string(root.at("task"), "task");
  for (const auto& [key, value] : root.items()) {
    if (key == "task") {
      continue;
    } else if (key == "dump_path") {
      config.dump_path = get_string(value, key);
    } else if (key == "rank") {
      config.rank = get_indices(value, key);
    } else if (key == "step") {
      config.step = get_indices(value, key);
    } else if (key == "level") {
      config.level = get_string(value, key);
    } else if (key == "extra_info") {
      config.extra_info = get_bool(value, key);
    } else if (key == "async_dump") {
      config.async_dump = get_bool(value, key);
    } else if (key == "precision" || key == "risk_level") {
      get_string(value, key);  // level L1's settings: no effect on module dumps
    } else if (key == "dump_enable" || key == "load" || key == "custom_op_namespaces") {
      fail<ValueError>("probe.config.unsupported",
                       "msprobe config: '" + key + "' is not supported by modhooks::probe");
    } else if (contains(task_names(), key)) {
      if (key == config.task) {
        read_section(value, key, config);
      } else if (!value.is_object()) {
        wrong_type(key, "an object");
      }
    } else {
      fail<KeyError>("probe.config.unknown_key", "msprobe config: unknown key '" + key + "'");
    }
  }
  config.validate();
  return config;
}

Config Config::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    fail<RuntimeError>("probe.config.open", "msprobe config: cannot open '" + path + "'");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return from_json(text.str());
  } catch (const Error& e) {
    std::rethrow_exception(e.with_message(path + ": " + e.what()));
  }
}

void Config::validate() const {
  auto invalid = [](const std::string& key, const std::string& what) {
    fail<ValueError>("probe.config.invalid_value", "msprobe config: '" + key + "' " + what);
  };
  if (task != "statistics" && task != "tensor") {
    invalid("task",
            "is '" + task + "': modhooks::probe dumps the tasks \"statistics\" and \"tensor\"");
  }
  if (level != "L0") {
    invalid("level", "is '" + level +
                         "': modhooks::probe dumps level \"L0\" (modules) only; msprobe's "
                         "default \"L1\" names Python's API calls, which a C++ run cannot match");
  }
  if (dump_path.empty()) invalid("dump_path", "is empty");
  const std::string section = task + ".";
  if (task == "statistics" && summary_mode != "statistics" && summary_mode != "md5") {
    invalid(section + "summary_mode", "is '" + summary_mode + "': \"statistics\" or \"md5\"");
  }
  for (const std::string& mode : data_mode) {
    if (!contains({"all", "forward", "backward", "input", "output"}, mode)) {
      invalid(section + "data_mode",
              "holds '" + mode + "': \"all\", \"forward\", \"backward\", \"input\", \"output\"");
    }
  }
  if (!scope.empty()) {
    static const std::regex module_name(R"(^(Cell|Module)\..*\.(forward|backward)\.\d+$)");
    if (scope.size() != 2) {
      invalid(section + "scope", "must name two entries, the first and the last to dump");
    }
    for (const std::string& name : scope) {
      if (!std::regex_match(name, module_name)) {
        invalid(section + "scope", "holds '" + name +
                                       "', not a module's entry name "
                                       "(Module.<path>.<Class>.forward.<n>)");
      }
    }
  }
}

}  // namespace probe
MODHOOKS_END_NAMESPACE
