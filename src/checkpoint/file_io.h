// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/Storage.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A checkpoint file opened for reading. It is opened without blocking, so a FIFO cannot stall
/// the process waiting for a writer, and read only when it is a regular file.
class CheckpointFile final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit CheckpointFile(const std::string& path);
  ~CheckpointFile() override;
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  std::size_t size() const override { return size_; }
  /// Short only at the end of the file or on an I/O error, which read_exactly reports.
  std::size_t read(std::uint64_t pos, void* buf, std::size_t n, const char* what) const override;
  int fd() const { return fd_; }

 private:
  int fd_;
  std::size_t size_ = 0;
};

/// A read-only mapping of a whole checkpoint file, kept alive by every storage that views it
/// (see MappedRecord). Pages are read from the file when first touched; nothing can write
/// through the mapping (PROT_READ), and it is private, so the file's later changes may or may
/// not show through, as for any mapping.
class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The file, for reads that should not fault pages in through the mapping (pread).
  const CheckpointFile& file() const { return file_; }
  const char* data() const { return data_; }
  std::size_t size() const { return file_.size(); }
  /// Lets the kernel drop the pages of [p, p + n) from this process (they stay in the page
  /// cache), so that copying a large file through the mapping does not grow the resident set by
  /// the file's size. Only pages wholly inside the range are dropped.
  void release(const void* p, std::size_t n) const noexcept;

 private:
  explicit MappedFile(const std::string& path);
  CheckpointFile file_;
  char* data_ = nullptr;
};

/// What a storage viewing a mapped file keeps: the mapping alive, and where its bytes lie in
/// the file, for copies that read them with pread and for the CRC-32 check `load_model` makes.
struct MappedRecord {
  std::shared_ptr<const MappedFile> file;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  /// How errors name it: "record 'archive/data/0'", "tensor 'weight'".
  std::string name;
  /// The CRC-32 to check before its bytes are used (torch.save records whose archive is
  /// checked); unchecked storages of `load(path, {.mmap = true})` have none.
  std::optional<std::uint32_t> crc;
};

/// A CPU storage of `record.size` bytes over the mapping, holding the record (and the mapping)
/// until its last user is gone. The caller checks that the bytes lie inside the file.
c10::Storage mapped_storage(MappedRecord record);

/// The record a storage made by mapped_storage views; nullptr for every other storage.
const MappedRecord* mapped_record(const c10::Storage& storage);

}  // namespace detail
MODHOOKS_END_NAMESPACE
