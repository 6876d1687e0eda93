// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/state/model_io.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fmt/format.h>
#include <libdeflate.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "file_io.h"
#include "formats.h"
#include "modhooks/core/error.h"
#include "traversal.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// What a copy holds beside the model at most: the pinned staging buffer of a CUDA target, the
/// pages of a mapped record being converted to another dtype or checked against its CRC-32.
constexpr std::uint64_t kChunk = std::uint64_t{16} << 20;

/// An index is read whole; Hugging Face's run to a few megabytes.
constexpr std::uint64_t kMaxIndexSize = 100'000'000;

/// Where the bytes of a mapped checkpoint tensor lie in its file: its record, and its offset in
/// the file (a view may start inside its record).
struct Source {
  const MappedRecord* record = nullptr;
  std::uint64_t offset = 0;
};

Source source_of(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return {};
  const MappedRecord* record = mapped_record(tensor.storage());
  if (record == nullptr) return {};
  return {record, record->offset +
                      static_cast<std::uint64_t>(tensor.storage_offset()) * tensor.element_size()};
}

/// Writing a tensor's memory directly, unlike `copy_`, moves no version counter: moved by hand,
/// so an autograd graph that saved the tensor before the load refuses to run backward, as after
/// `load_state_dict`.
void bump_version(const at::Tensor& tensor) { tensor.unsafeGetTensorImpl()->bump_version(); }

/// Whether `record`'s bytes match its CRC-32, read from the mapping a chunk at a time, each
/// chunk's pages dropped after it: the check reads the file once, without a copy, and holds
/// kChunk of it.
bool crc_matches(const MappedRecord& record) {
  const char* data = record.file->data() + record.offset;
  std::uint32_t crc = 0;  // libdeflate_crc32's initial value
  for (std::uint64_t done = 0; done < record.size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, record.size - done));
    crc = ::libdeflate_crc32(crc, data + done, n);
    record.file->release(data + done, n);
    done += n;
  }
  return crc == *record.crc;
}

/// load_model's copy: the file's bytes read (pread) straight into a CPU tensor's memory, or
/// through a pinned buffer of kChunk into a CUDA tensor's; conversions of dtype or layout go
/// through the mapping, kChunk at a time, its pages dropped after each.
class FileCopy final : public DirectCopy {
 public:
  void prepare(const std::vector<std::pair<at::Tensor, at::Tensor>>& copies) override {
    std::unordered_set<const MappedRecord*> checked;
    for (const auto& [target, source] : copies) {
      // A conversion libtorch lacks (an old libtorch's float8 to complex) fails here, on one
      // element, rather than halfway through the model.
      if (source.numel() != 0 && source.scalar_type() != target.scalar_type()) {
        at::empty({1}, target.options().device(c10::kCPU))
            .copy_(source.as_strided({1}, {1}, source.storage_offset()));
      }
      const MappedRecord* record = source_of(source).record;
      if (record == nullptr || !record->crc || !checked.insert(record).second) continue;
      if (!crc_matches(*record)) {
        fail(record->name + " fails its CRC-32 check (the file is damaged)");
      }
    }
  }

  void copy(const at::Tensor& target, const at::Tensor& source) override {
    const Source from = source_of(source);
    const bool contiguous = source.is_contiguous() && target.is_contiguous();
    if (from.record == nullptr || !contiguous) {
      target.copy_(source);
      if (from.record) {
        from.record->file->release(from.record->file->data() + from.record->offset,
                                   static_cast<std::size_t>(from.record->size));
      }
      return;
    }
    const auto& file = from.record->file;
    const char* what = from.record->name.c_str();
    if (source.scalar_type() == target.scalar_type() && target.is_cpu()) {
      read_exactly(file->file(), from.offset, target.data_ptr(), source.nbytes(), what);
      bump_version(target);
      return;
    }
    if (source.scalar_type() == target.scalar_type() && target.is_cuda()) {
      // Through a pinned buffer: the driver copies pageable memory through its own staging, one
      // more copy, and a mapping's pages would stay resident.
      if (!staging_.defined()) {
        staging_ = at::empty({static_cast<std::int64_t>(kChunk)},
                             at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      }
      const at::Tensor bytes =
          at::from_blob(target.data_ptr(), {static_cast<std::int64_t>(source.nbytes())},
                        at::TensorOptions().dtype(at::kByte).device(target.device()));
      for (std::uint64_t done = 0; done < source.nbytes();) {
        const std::uint64_t n = std::min<std::uint64_t>(kChunk, source.nbytes() - done);
        read_exactly(file->file(), from.offset + done, staging_.data_ptr(),
                     static_cast<std::size_t>(n), what);
        // Synchronous, so the buffer is free again when it returns.
        bytes.narrow(0, static_cast<std::int64_t>(done), static_cast<std::int64_t>(n))
            .copy_(staging_.narrow(0, 0, static_cast<std::int64_t>(n)), /*non_blocking=*/false);
        done += n;
      }
      bump_version(target);
      return;
    }
    // A conversion: copy_ does it, from the mapping, a chunk at a time.
    const at::Tensor from_flat = source.reshape({-1});
    const at::Tensor to_flat = target.view({-1});
    const std::int64_t step =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(kChunk / source.element_size()));
    for (std::int64_t begin = 0; begin < source.numel(); begin += step) {
      const std::int64_t n = std::min(step, source.numel() - begin);
      const at::Tensor part = from_flat.narrow(0, begin, n);
      to_flat.narrow(0, begin, n).copy_(part);
      file->release(part.data_ptr(), static_cast<std::size_t>(n) * source.element_size());
    }
  }

 private:
  at::Tensor staging_;
};

/// Shard names are file names in the index's folder: a hostile index must not reach elsewhere.
void check_shard_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    fail("shard name '" + name + "' is not a file name in the index's folder");
  }
  if (is_index_path(name)) fail("shard '" + name + "' is an index itself");
}

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

nlohmann::json read_index(const std::string& path) {
  const CheckpointFile file(path);
  if (file.size() > kMaxIndexSize) {
    fail("the index is " + std::to_string(file.size()) + " bytes, more than the 100 MB limit");
  }
  std::string text(file.size(), '\0');
  read_exactly(file, 0, text.data(), text.size(), "index");
  nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) fail("the index is not valid JSON");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail("the index has no \"weight_map\" object");
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
    if (!shard.is_string()) fail("the index maps '" + key + "' to something not a file name");
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
        fail("shard '" + shard + "' holds '" + key + "', which the index maps " +
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
      fail("the index maps '" + key + "' to shard '" + shard + "', which does not hold it");
    }
  }
  return out;
}

IncompatibleKeys load_model(const std::string& path, bool strict, const LoadOptions& options,
                            const LoadStateDict& load_state_dict) {
  return with_context("modhooks::load_model('" + path + "')", [&] {
    LoadOptions mapped = options;
    mapped.mmap = true;
    const StateDict sd = is_index_path(path) ? load_index(path, mapped) : read_file(path, mapped);
    FileCopy copy;
    struct Reset {
      ~Reset() { direct_copy = nullptr; }
    } reset;
    direct_copy = &copy;
    return load_state_dict(sd, strict);
  });
}

void save_model(const StateDict& state_dict, const std::string& path,
                std::optional<std::uint64_t> max_shard_size) {
  with_context("modhooks::save_model('" + path + "')", [&] {
    if (!is_index_path(path)) {
      if (max_shard_size) {
        fail("a sharded checkpoint is saved under its index's name, ending in '.index.json'");
      }
      save_file(state_dict, path);
      return;
    }
    if (!max_shard_size) fail("an index path needs a max_shard_size");
    if (*max_shard_size == 0) fail("max_shard_size must be positive");
    // "dir/model.safetensors.index.json": shards "model-00001-of-0000N.safetensors" in dir.
    const std::string folder = folder_of(path);
    const std::string weights = path.substr(folder.size(), path.size() - folder.size() - 11);
    const std::size_t dot = weights.rfind('.');
    if (dot == std::string::npos || dot == 0) {
      fail(
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
      if (!parts.back().empty() && in_part + size > *max_shard_size) {
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
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    save_text(index.dump(2) + "\n", path);
  });
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
