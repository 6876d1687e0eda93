// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "package.h"

#include <ATen/Context.h>

#include <exception>
#include <fstream>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
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
    : CompiledProgram(std::move(path_)), runners(num_runners) {
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
  read_point_table(metadata);
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

void AotiModel::read_point_table(const std::unordered_map<std::string, std::string>& metadata) {
  if (metadata.find(kAbiKey) == metadata.end()) return;  // compiled without modhooks' points
  auto table = metadata.find(kPointsKey);
  read_points(table == metadata.end() ? std::string("[]") : table->second,
              "aoti.package.bad_points");
}

}  // namespace detail
MODHOOKS_END_NAMESPACE

// The global lists of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooks<const modhooks::aoti::Point>;
