// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "package.h"

#include <ATen/Context.h>

#include <exception>
#include <fstream>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/points/detail/table.h"

// The global tables of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooksActive<const modhooks::aoti::Point>;
template const std::shared_ptr<modhooks::detail::ModuleHooks<const modhooks::aoti::Point>>&
modhooks::detail::global_hooks<const modhooks::aoti::Point>();

MODHOOKS_BEGIN_NAMESPACE

namespace aoti {

Point::Point(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
    : PointInfo(std::move(name), std::move(type_name), inputs, single, index),
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
/// The key AOTInductor writes the device a package was compiled for under ("cpu", "cuda").
constexpr const char* kDeviceKey = "AOTI_DEVICE_KEY";

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
  // What the package says of itself, read before any of its native code is loaded: a package
  // of another modhooks ABI, or one compiled for a device this process lacks, is refused first.
  std::unordered_map<std::string, std::string> metadata;
  try {
    metadata =
        torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, model_name);
  } catch (const std::exception& e) {
    fail_unloadable(e);
  }
  check_abi(metadata);
  check_device(metadata);
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, model_name, /*run_single_threaded=*/false, num_runners,
        static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    fail_unloadable(e);
  }
  read_points(metadata);
}

void AotiModel::fail_unloadable(const std::exception& e) const {
  fail<FormatError>("aoti.package.unloadable",
                    "modhooks: cannot load the AOTInductor package " + path + ": " + e.what());
}

void AotiModel::check_abi(const std::unordered_map<std::string, std::string>& metadata) const {
  auto abi = metadata.find(kAbiKey);
  if (abi != metadata.end()) check_point_abi(abi->second, path, "aoti.package.abi_mismatch");
}

void AotiModel::check_device(const std::unordered_map<std::string, std::string>& metadata) const {
  auto device = metadata.find(kDeviceKey);
  if (device == metadata.end() || device->second.rfind("cuda", 0) != 0) return;
  if (at::hasCUDA()) return;
  fail<RuntimeError>("aoti.package.cuda_unavailable",
                     "modhooks: " + path +
                         " was compiled for CUDA, and this process has no CUDA device (or a "
                         "libtorch built without CUDA): compile it for the CPU, or run it where "
                         "CUDA is");
}

void AotiModel::read_points(const std::unordered_map<std::string, std::string>& metadata) {
  if (metadata.find(kAbiKey) == metadata.end()) return;  // compiled without modhooks' points
  auto table = metadata.find(kPointsKey);
  for (PointEntry& entry :
       parse_point_table(table == metadata.end() ? std::string("[]") : table->second, path,
                         "aoti.package.bad_points")) {
    auto point = std::make_unique<aoti::Point>(std::move(entry.name), std::move(entry.type_name),
                                               entry.inputs, entry.single, points.size());
    names.push_back(point->name());
    points.push_back(std::move(point));
  }
  for (const auto& p : points) by_name_.emplace(p->name(), p.get());
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
