// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "package.h"

#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"

// The global tables of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooksActive<const modhooks::aoti::Point>;
template const std::shared_ptr<modhooks::detail::ModuleHooks<const modhooks::aoti::Point>>&
modhooks::detail::global_hooks<const modhooks::aoti::Point>();

MODHOOKS_BEGIN_NAMESPACE

namespace aoti {

Point::Point(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
    : name_(std::move(name)),
      type_name_(std::move(type_name)),
      inputs_(inputs),
      single_(single),
      index_(index),
      hooks_(std::make_shared<modhooks::detail::PointHooks>()) {}

}  // namespace aoti

namespace detail {

const std::shared_ptr<PointHooks>& hooks_for(const aoti::Point& point) noexcept {
  return point.hooks_;
}

namespace {

/// The keys of a package's metadata that modhooks writes (python/modhooks/export.py).
constexpr const char* kAbiKey = "modhooks.abi";
constexpr const char* kPointsKey = "modhooks.points";

/// The hook-point protocol's version: the library's ABI, major.minor while the major version
/// is 0, as the ABI namespace and the soname are.
std::string library_abi() {
  return std::to_string(MODHOOKS_VERSION_MAJOR) + "." + std::to_string(MODHOOKS_VERSION_MINOR);
}

bool zip_file(const std::string& path, bool& exists) {
  std::ifstream file(path, std::ios::binary);
  exists = static_cast<bool>(file);
  char magic[4] = {};
  file.read(magic, sizeof magic);
  return file.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

}  // namespace

AotiModel::AotiModel(std::string path_, std::size_t num_runners, const std::string& model_name,
                     int device_index)
    : path(std::move(path_)), runners(num_runners) {
  if (num_runners == 0) {
    fail<ValueError>("aoti.model.num_runners",
                     "modhooks: num_runners must be at least 1 (loading " + path + ")");
  }
  bool exists = false;
  if (!zip_file(path, exists)) {
    if (!exists) {
      fail<RuntimeError>("aoti.package.open_failed",
                         "modhooks: cannot open the AOTInductor package " + path);
    }
    fail<FormatError>(
        "aoti.package.not_a_package",
        "modhooks: " + path + " is not an AOTInductor package (.pt2): not a zip file");
  }
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, model_name, /*run_single_threaded=*/false, num_runners,
        static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    fail<FormatError>("aoti.package.unloadable",
                      "modhooks: cannot load the AOTInductor package " + path + ": " + e.what());
  }
  read_points(loader->get_metadata());
}

void AotiModel::read_points(const std::unordered_map<std::string, std::string>& metadata) {
  auto abi = metadata.find(kAbiKey);
  if (abi == metadata.end()) return;  // compiled without modhooks' points
  if (abi->second != library_abi()) {
    fail<RuntimeError>("aoti.package.abi_mismatch",
                       "modhooks: " + path + " was exported for the modhooks ABI " + abi->second +
                           "; this library is " + library_abi() +
                           ": export it again with the matching modhooks Python package");
  }
  auto table = metadata.find(kPointsKey);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(table == metadata.end() ? std::string("[]") : table->second);
    for (const auto& entry : parsed) {
      auto point = std::make_unique<aoti::Point>(
          entry.at("name").get<std::string>(), entry.value("type", std::string()),
          entry.value("inputs", false), entry.value("single", true), points.size());
      names.push_back(point->name());
      points.push_back(std::move(point));
    }
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("aoti.package.bad_points",
                      "modhooks: the point table of " + path + " cannot be read: " + e.what());
  }
  for (const auto& p : points) by_name_.emplace(p->name(), p.get());
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
