// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "shards.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "file_io.h"
#include "files.h"
#include "formats.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// An index is read whole; Hugging Face's run to a few megabytes.
constexpr std::uint64_t kMaxIndexSize = 100'000'000;

/// Shard names are file names in the index's folder: a hostile index must not reach elsewhere.
void check_shard_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    fail<FormatError>("checkpoint.index.bad_shard_name",
                      "shard name '" + name + "' is not a file name in the index's folder");
  }
  if (is_index_path(name))
    fail<FormatError>("checkpoint.index.shard_is_index", "shard '" + name + "' is an index itself");
}

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

nlohmann::json read_index(const std::string& path) {
  const CheckpointFile file(path);
  if (file.size() > kMaxIndexSize) {
    fail<FormatError>("checkpoint.index.too_large", "the index is " + std::to_string(file.size()) +
                                                        " bytes, more than the 100 MB limit");
  }
  std::string text(file.size(), '\0');
  read_exactly(file, 0, text.data(), text.size(), "index");
  nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded())
    fail<FormatError>("checkpoint.index.bad_json", "the index is not valid JSON");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail<FormatError>("checkpoint.index.no_weight_map", "the index has no \"weight_map\" object");
  }
  return index;
}

}  // namespace

bool is_index_path(const std::string& path) {
  static constexpr std::string_view kSuffix = ".index.json";
  return path.size() >= kSuffix.size() &&
         path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix.data()) == 0;
}

StateDict load_index(const std::string& path, const LoadOptions& options) {
  const nlohmann::json index = read_index(path);
  std::map<std::string, std::string> shard_of;  // key -> shard
  std::vector<std::string> shards;              // in order of first mention
  for (const auto& [key, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      fail<FormatError>("checkpoint.index.bad_shard_name",
                        "the index maps '" + key + "' to something not a file name");
    const std::string name = shard.get<std::string>();
    check_shard_name(name);
    if (std::find(shards.begin(), shards.end(), name) == shards.end()) shards.push_back(name);
    shard_of.emplace(key, name);
  }
  const std::string folder = folder_of(path);
  StateDict out;
  for (const std::string& shard : shards) {
    StateDict part =
        with_context("shard '" + shard + "'", [&] { return read_file(folder + shard, options); });
    for (auto& [key, tensor] : part) {
      const auto found = shard_of.find(key);
      if (found == shard_of.end() || found->second != shard) {
        fail<FormatError>("checkpoint.index.unlisted_key",
                          "shard '" + shard + "' holds '" + key + "', which the index maps " +
                              (found == shard_of.end() ? std::string("to no shard")
                                                       : "to shard '" + found->second + "'"));
      }
      out.insert_or_assign(key, std::move(tensor));
    }
    for (auto& [prefix, metadata] : part.metadata()) {
      out.metadata().insert_or_assign(prefix, std::move(metadata));
    }
  }
  for (const auto& [key, shard] : shard_of) {
    if (!out.contains(key)) {
      fail<FormatError>("checkpoint.index.missing_key", "the index maps '" + key + "' to shard '" +
                                                            shard + "', which does not hold it");
    }
  }
  return out;
}

void save_index(const StateDict& state_dict, const std::string& path,
                std::uint64_t max_shard_size) {
  if (max_shard_size == 0)
    fail<ValueError>("checkpoint.save.bad_max_shard_size", "max_shard_size must be positive");
  // "dir/model.safetensors.index.json": shards "model-00001-of-0000N.safetensors" in dir.
  const std::string folder = folder_of(path);
  const std::string weights = path.substr(folder.size(), path.size() - folder.size() - 11);
  const std::size_t dot = weights.rfind('.');
  if (dot == std::string::npos || dot == 0) {
    fail<ValueError>("checkpoint.save.bad_index_name",
                     "the index's name must be the weights' file name and '.index.json', as in "
                     "'model.safetensors.index.json'");
  }
  const std::string stem = weights.substr(0, dot);
  const std::string extension = weights.substr(dot);

  std::vector<StateDict> parts(1);
  std::uint64_t in_part = 0;
  std::uint64_t total = 0;
  for (const auto& [key, tensor] : state_dict) {
    const std::uint64_t size = tensor.defined() ? tensor.nbytes() : 0;
    if (!parts.back().empty() && in_part + size > max_shard_size) {
      parts.emplace_back();
      in_part = 0;
    }
    parts.back().insert_or_assign(key, tensor);
    in_part += size;
    total += size;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string name =
        fmt::format("{}-{:05d}-of-{:05d}{}", stem, i + 1, parts.size(), extension);
    for (const auto& [prefix, metadata] : state_dict.metadata()) {
      parts[i].metadata().insert_or_assign(prefix, metadata);  // torch.save shards keep them
    }
    with_context("shard '" + name + "'", [&] { save_file(parts[i], folder + name); });
    for (const auto& entry : parts[i]) weight_map[entry.first] = name;
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  save_text(index.dump(2) + "\n", path);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
