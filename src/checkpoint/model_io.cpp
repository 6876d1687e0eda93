// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/checkpoint/model_io.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <libdeflate.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "file_io.h"
#include "files.h"
#include "formats.h"
#include "modhooks/core/error.h"
#include "shards.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// What a copy holds beside the model at most: the pinned staging buffer of a CUDA target, the
/// pages of a mapped record being converted to another dtype or checked against its CRC-32.
constexpr std::uint64_t kChunk = std::uint64_t{16} << 20;

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
class FileCopy final : public TensorCopy {
 public:
  void prepare(const std::vector<std::pair<at::Tensor, at::Tensor>>& copies) override {
    std::unordered_set<const MappedRecord*> checked;
    // What would make a copy fail (conversions, unwritable targets) load_state_dict's checks
    // found before this; the CRC-32s are the file's part.
    for (const auto& [target, source] : copies) {
      const MappedRecord* record = source_of(source).record;
      if (record == nullptr || !record->crc || !checked.insert(record).second) continue;
      if (!crc_matches(*record)) {
        fail<FormatError>("checkpoint.zip.crc_mismatch",
                          record->name + " fails its CRC-32 check (the file is damaged)");
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

}  // namespace

IncompatibleKeys load_model(const std::string& path, bool strict, const LoadOptions& options,
                            const LoadStateDict& load_state_dict) {
  return with_context("modhooks::load_model('" + path + "')", [&] {
    LoadOptions mapped = options;
    mapped.mmap = true;
    const StateDict sd = is_index_path(path) ? load_index(path, mapped) : read_file(path, mapped);
    FileCopy copy;
    return load_state_dict(sd, strict, copy);
  });
}

void save_model(const StateDict& state_dict, const std::string& path,
                std::optional<std::uint64_t> max_shard_size) {
  with_context("modhooks::save_model('" + path + "')", [&] {
    if (!is_index_path(path)) {
      if (max_shard_size) {
        fail<ValueError>(
            "checkpoint.save.shard_size_without_index",
            "a sharded checkpoint is saved under its index's name, ending in '.index.json'");
      }
      save_file(state_dict, path);
      return;
    }
    if (!max_shard_size)
      fail<ValueError>("checkpoint.save.index_without_shard_size",
                       "an index path needs a max_shard_size");
    save_index(state_dict, path, *max_shard_size);
  });
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
