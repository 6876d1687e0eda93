// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/points/detail/table.h"

#include <nlohmann/json.hpp>

#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

std::vector<PointEntry> parse_point_table(const std::string& json, const std::string& path,
                                          const char* bad_id) {
  std::vector<PointEntry> entries;
  try {
    for (const auto& row : nlohmann::json::parse(json)) {
      entries.push_back({row.at("name").get<std::string>(), row.value("type", std::string()),
                         row.value("inputs", false), row.value("single", true)});
    }
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>(bad_id,
                      "modhooks: the point table of " + path + " cannot be read: " + e.what());
  }
  return entries;
}

void check_point_abi(const std::string& abi, const std::string& path, const char* mismatch_id) {
  const std::string library =
      std::to_string(MODHOOKS_VERSION_MAJOR) + "." + std::to_string(MODHOOKS_VERSION_MINOR);
  if (abi == library) return;
  fail<RuntimeError>(mismatch_id, "modhooks: " + path + " was exported for the modhooks ABI " +
                                      abi + "; this library is " + library +
                                      ": export it again with the matching modhooks Python "
                                      "package");
}

void fail_no_point(const std::string& path, const std::string& name,
                   const std::vector<std::string>& names, const char* id, const char* how) {
  std::string listed;
  for (const auto& n : names) listed += (listed.empty() ? "'" : ", '") + n + "'";
  fail<KeyError>(id,
                 "modhooks: " + path + " has no point '" + name + "'" +
                     (listed.empty() ? ": it was exported without points (" + std::string(how) + ")"
                                     : "; its points are " + listed));
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
