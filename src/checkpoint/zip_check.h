// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/Allocator.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// One stored record of a checked archive.
struct ZipRecord {
  std::string name;    // as the archive spells it, folder included
  std::uint64_t data;  // where its bytes start in the file
  std::uint64_t size;
  std::uint32_t crc;  // the CRC-32 its central directory entry records
};

/// A torch.save zip archive, its directory checked before anything is read from it.
///
/// libtorch's reader (miniz) allocates a record's uncompressed size as its central directory
/// states it, and trusts that size for compressed and zip64 entries, so a few hostile bytes could
/// ask for terabytes. torch.save stores every record uncompressed, so modhooks accepts only such
/// archives: the directory miniz would read (found through the zip64 end record where there is
/// one), every entry stored, its sizes equal, its data inside the file, no two entries
/// overlapping and no name twice (case-insensitively, as miniz looks names up). Then every record
/// is bounded by the file, and all records together by the file's size. modhooks reads the
/// records itself from the checked directory, so what is checked is what is read.
class ZipArchive {
 public:
  /// Checks the layout and the version record. With `verify_crc32`, every record read is checked
  /// against its CRC-32, unless the archive records none (torch.save with
  /// `torch.serialization.set_crc32_options(False)` writes 0 for every record).
  ZipArchive(const caffe2::serialize::ReadAdapterInterface& in, bool verify_crc32);

  /// The record `name` in the archive's folder ("data.pkl", "data/0"), found as miniz finds it:
  /// case-insensitively. nullptr when there is none.
  const ZipRecord* find(const std::string& name) const;

  /// The record's bytes, CRC-32 checked; an error names the record.
  at::DataPtr read(const ZipRecord& record) const;

  /// Whether `read` checks CRC-32s: asked for, and the archive records them.
  bool checks_crc32() const { return verify_crc32_; }

  /// An upper bound of the memory the archive's index of records holds, for the load's budget.
  std::uint64_t index_bytes() const;

 private:
  const caffe2::serialize::ReadAdapterInterface& in_;
  std::unordered_map<std::string, ZipRecord> records_;  // by case-folded name
  std::string folder_;                                  // case-folded, with its slash
  bool verify_crc32_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
