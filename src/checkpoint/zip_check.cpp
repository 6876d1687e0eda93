// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "zip_check.h"

#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/versions.h>
#include <libdeflate.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "byte_io.h"
#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

// Record layouts of the zip specification (APPNOTE.TXT), sizes in bytes.
constexpr std::uint32_t kEndSignature = 0x06054b50;
constexpr std::uint32_t kEnd64LocatorSignature = 0x07064b50;
constexpr std::uint32_t kEnd64Signature = 0x06064b50;
constexpr std::uint32_t kCentralSignature = 0x02014b50;
constexpr std::uint32_t kLocalSignature = 0x04034b50;
constexpr std::uint64_t kEndSize = 22;
constexpr std::uint64_t kMaxCommentSize = 0xFFFF;
constexpr std::uint64_t kEnd64LocatorSize = 20;
constexpr std::uint64_t kEnd64Size = 56;
constexpr std::uint64_t kCentralSize = 46;
constexpr std::uint64_t kLocalSize = 30;
constexpr std::uint16_t kZip64ExtraId = 0x0001;

using Bytes = std::vector<unsigned char>;

std::uint64_t le(const Bytes& b, std::uint64_t at, int n) { return load_le(b.data() + at, n); }

Bytes read_block(const caffe2::serialize::ReadAdapterInterface& in, std::uint64_t pos,
                 std::uint64_t n, const char* what) {
  Bytes block(static_cast<std::size_t>(n));
  read_exactly(in, pos, block.data(), block.size(), what);
  return block;
}

struct Directory {
  std::uint64_t entries;
  std::uint64_t size;
  std::uint64_t offset;
  std::uint64_t end_record;  // where the directory must end: the (zip64) end record
};

/// Finds the central directory as miniz (libtorch's and Python's zip reader) does: the last end
/// record, and the zip64 end record when a zip64 locator precedes it, which torch.save always
/// writes. miniz then takes every value from the zip64 record; modhooks requires the layout
/// torch.save writes (zip64 record, locator and end record back to back, directory right before
/// them, classic values equal to the zip64 ones or saturated), so that no other reading of the
/// file (an older miniz, Python's zipfile) finds a different directory.
Directory find_directory(const caffe2::serialize::ReadAdapterInterface& in) {
  const std::uint64_t file_size = in.size();
  if (file_size < kEndSize) {
    fail<FormatError>("checkpoint.zip.not_a_zip",
                      "not a zip archive: " + std::to_string(file_size) +
                          " bytes is too short for a zip end record");
  }
  const std::uint64_t tail_size = std::min(file_size, kEndSize + kMaxCommentSize);
  const std::uint64_t tail_pos = file_size - tail_size;
  Bytes tail = read_block(in, tail_pos, tail_size, "zip end record");
  // The end record is the last thing in the file but for its comment, so search backwards.
  std::uint64_t at = tail_size - kEndSize;
  while (le(tail, at, 4) != kEndSignature) {
    if (at == 0)
      fail<FormatError>("checkpoint.zip.not_a_zip", "not a zip archive: no zip end record found");
    --at;
  }
  const std::uint64_t end = tail_pos + at;
  if (le(tail, at + 4, 2) != 0 || le(tail, at + 6, 2) != 0 ||
      le(tail, at + 8, 2) != le(tail, at + 10, 2)) {
    fail<FormatError>("checkpoint.zip.multi_disk", "multi-disk zip archives are not supported");
  }
  Directory dir{le(tail, at + 10, 2), le(tail, at + 12, 4), le(tail, at + 16, 4), end};
  Bytes locator;
  if (end >= kEnd64LocatorSize) {
    locator = read_block(in, end - kEnd64LocatorSize, kEnd64LocatorSize, "zip64 end locator");
  }
  if (locator.empty() || le(locator, 0, 4) != kEnd64LocatorSignature) {
    if (dir.entries == 0xFFFF || dir.size == 0xFFFFFFFF || dir.offset == 0xFFFFFFFF) {
      fail<FormatError>("checkpoint.zip.no_zip64_locator",
                        "zip64 archive without a zip64 end locator");
    }
  } else {
    const std::uint64_t end64 = le(locator, 8, 8);
    if (end - kEnd64LocatorSize < kEnd64Size || end64 != end - kEnd64LocatorSize - kEnd64Size) {
      fail<FormatError>("checkpoint.zip.bad_zip64_locator",
                        "zip64 end locator points to offset " + std::to_string(end64) +
                            ", not to a zip64 end record right before it");
    }
    Bytes record = read_block(in, end64, kEnd64Size, "zip64 end record");
    if (le(record, 0, 4) != kEnd64Signature || le(record, 4, 8) != kEnd64Size - 12) {
      fail<FormatError>("checkpoint.zip.no_zip64_record",
                        "no zip64 end record at offset " + std::to_string(end64));
    }
    if (le(locator, 4, 4) != 0 || le(locator, 16, 4) != 1 || le(record, 16, 4) != 0 ||
        le(record, 20, 4) != 0 || le(record, 24, 8) != le(record, 32, 8)) {
      fail<FormatError>("checkpoint.zip.multi_disk", "multi-disk zip archives are not supported");
    }
    const Directory dir64{le(record, 32, 8), le(record, 40, 8), le(record, 48, 8), end64};
    // Where the two records disagree, readers that stop at the classic one would read another
    // directory than miniz does.
    auto agrees = [](std::uint64_t classic, std::uint64_t zip64, std::uint64_t saturated) {
      return classic == zip64 || (classic == saturated && zip64 >= saturated);
    };
    if (!agrees(dir.entries, dir64.entries, 0xFFFF) || !agrees(dir.size, dir64.size, 0xFFFFFFFF) ||
        !agrees(dir.offset, dir64.offset, 0xFFFFFFFF)) {
      fail<FormatError>(
          "checkpoint.zip.inconsistent_end_records",
          "the zip end record (" + std::to_string(dir.entries) + " entries, " +
              std::to_string(dir.size) + " bytes at offset " + std::to_string(dir.offset) +
              ") and the zip64 end record (" + std::to_string(dir64.entries) + " entries, " +
              std::to_string(dir64.size) + " bytes at offset " + std::to_string(dir64.offset) +
              ") describe different central directories");
    }
    dir = dir64;
  }
  std::uint64_t dir_end = 0;
  if (add_overflows(dir.offset, dir.size, &dir_end) || dir_end != dir.end_record) {
    fail<FormatError>("checkpoint.zip.bad_directory_bounds",
                      "zip central directory (offset " + std::to_string(dir.offset) + ", " +
                          std::to_string(dir.size) +
                          " bytes) does not end where the zip end records begin, at "
                          "offset " +
                          std::to_string(dir.end_record));
  }
  if (dir.entries > dir.size / kCentralSize) {
    fail<FormatError>("checkpoint.zip.too_many_entries",
                      "zip end record claims " + std::to_string(dir.entries) +
                          " entries, more than its " + std::to_string(dir.size) +
                          "-byte central directory can hold");
  }
  return dir;
}

struct Span {
  std::uint64_t begin;  // the entry's local header
  std::uint64_t end;    // one past its data
  std::string name;
  std::uint64_t data;  // where its data starts
  std::uint32_t crc;   // CRC-32 of its data, from the central directory
};

/// miniz looks names up case-insensitively, so names are compared that way too.
std::string folded(const std::string& name) {
  std::string out = name;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// The version record, read as PyTorchStreamReader reads it (std::stoull: leading blanks,
/// digits, anything after), must name a format version this libtorch reads, as Python's
/// torch.load requires.
void check_version(const std::string& text) {
  std::size_t at = 0;
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  std::uint64_t version = 0;
  std::size_t digits = 0;
  for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at, ++digits) {
    if (version > caffe2::serialize::kMaxSupportedFileFormatVersion) break;
    version = version * 10 + static_cast<std::uint64_t>(text[at] - '0');
  }
  if (digits == 0 || version < caffe2::serialize::kMinSupportedFileFormatVersion ||
      version > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    fail<FormatError>("checkpoint.zip.unsupported_version",
                      "archive version '" + text + "' is not one this libtorch reads");
  }
}

/// Fills in the 64-bit sizes and offset that a zip64 entry keeps in its extra field.
void read_zip64_extra(const Bytes& cd, std::uint64_t extra, std::uint64_t extra_size,
                      const std::string& name, std::uint64_t* uncompressed,
                      std::uint64_t* compressed, std::uint64_t* local_offset) {
  std::uint64_t* wanted[] = {uncompressed, compressed, local_offset};
  std::uint64_t at = extra;
  const std::uint64_t end = extra + extra_size;
  while (end - at >= 4) {
    const std::uint64_t id = le(cd, at, 2);
    const std::uint64_t size = le(cd, at + 2, 2);
    if (size > end - at - 4)
      fail<FormatError>("checkpoint.zip.bad_extra_field",
                        "zip entry '" + name + "' has a truncated extra field");
    if (id == kZip64ExtraId) {
      std::uint64_t field = at + 4;
      for (std::uint64_t* value : wanted) {
        if (*value != 0xFFFFFFFF) continue;
        if (field + 8 > at + 4 + size) {
          fail<FormatError>("checkpoint.zip.bad_extra_field",
                            "zip entry '" + name + "' has a truncated zip64 extra field");
        }
        *value = le(cd, field, 8);
        field += 8;
      }
      return;
    }
    at += 4 + size;
  }
  for (std::uint64_t* value : wanted) {
    if (*value == 0xFFFFFFFF)
      fail<FormatError>("checkpoint.zip.bad_extra_field",
                        "zip entry '" + name + "' lacks its zip64 extra field");
  }
}

}  // namespace

ZipArchive::ZipArchive(const caffe2::serialize::ReadAdapterInterface& in, bool verify_crc32)
    : in_(in), verify_crc32_(verify_crc32) {
  if (in.size() >= 8) {
    char magic[8];
    read_exactly(in, 0, magic, 8, "file header");
    if (std::string(magic, 8) == "PYTORCH1") {
      fail<FormatError>(
          "checkpoint.zip.preview_format",
          "the file is in the preview-release format of torch.save, which is not supported");
    }
  }
  const Directory dir = find_directory(in);
  const Bytes cd = read_block(in, dir.offset, dir.size, "zip central directory");
  std::vector<Span> spans;
  spans.reserve(static_cast<std::size_t>(dir.entries));
  std::unordered_set<std::string> names;
  std::uint64_t at = 0;
  for (std::uint64_t i = 0; i < dir.entries; ++i) {
    if (cd.size() - at < kCentralSize || le(cd, at, 4) != kCentralSignature) {
      fail<FormatError>("checkpoint.zip.bad_record",
                        "zip central directory entry " + std::to_string(i) + " at offset " +
                            std::to_string(dir.offset + at) + " is malformed");
    }
    const std::uint64_t name_size = le(cd, at + 28, 2);
    const std::uint64_t extra_size = le(cd, at + 30, 2);
    const std::uint64_t comment_size = le(cd, at + 32, 2);
    if (cd.size() - at - kCentralSize < name_size + extra_size + comment_size) {
      fail<FormatError>(
          "checkpoint.zip.bad_record",
          "zip central directory entry " + std::to_string(i) + " runs past the directory");
    }
    std::string name(reinterpret_cast<const char*>(cd.data() + at + kCentralSize),
                     static_cast<std::size_t>(name_size));
    const std::uint64_t flags = le(cd, at + 8, 2);
    const std::uint64_t method = le(cd, at + 10, 2);
    std::uint64_t compressed = le(cd, at + 20, 4);
    std::uint64_t uncompressed = le(cd, at + 24, 4);
    std::uint64_t local = le(cd, at + 42, 4);
    read_zip64_extra(cd, at + kCentralSize + name_size, extra_size, name, &uncompressed,
                     &compressed, &local);
    if (flags & 1)
      fail<FormatError>("checkpoint.zip.encrypted", "zip entry '" + name + "' is encrypted");
    // miniz (Python's reader) reads a directory entry as empty, whatever its data: one that
    // ends in '/' or carries the MS-DOS directory attribute. torch.save writes none.
    if ((!name.empty() && name.back() == '/') || (le(cd, at + 38, 4) & 0x10) != 0) {
      fail<FormatError>(
          "checkpoint.zip.directory_entry",
          "zip entry '" + name + "' is a directory; torch.save archives hold only records");
    }
    if (method != 0) {
      fail<FormatError>(
          "checkpoint.zip.compressed",
          "zip entry '" + name + "' is compressed (method " + std::to_string(method) +
              "); torch.save stores records uncompressed and only such archives are read");
    }
    if (compressed != uncompressed) {
      fail<FormatError>("checkpoint.zip.size_mismatch",
                        "zip entry '" + name + "' is stored but its sizes differ (" +
                            std::to_string(compressed) + " and " + std::to_string(uncompressed) +
                            " bytes)");
    }
    if (!names.insert(folded(name)).second)
      fail<FormatError>("checkpoint.zip.duplicate_entry", "zip entry '" + name + "' appears twice");
    if (local > dir.offset || dir.offset - local < kLocalSize) {
      fail<FormatError>("checkpoint.zip.entry_out_of_bounds",
                        "zip entry '" + name + "' has its local header at offset " +
                            std::to_string(local) + ", outside the data area");
    }
    Bytes header = read_block(in, local, kLocalSize, "zip local header");
    if (le(header, 0, 4) != kLocalSignature) {
      fail<FormatError>(
          "checkpoint.zip.bad_local_header",
          "zip entry '" + name + "' has no local header at offset " + std::to_string(local));
    }
    const std::uint64_t data = local + kLocalSize + le(header, 26, 2) + le(header, 28, 2);
    std::uint64_t data_end = 0;
    if (add_overflows(data, uncompressed, &data_end) || data_end > dir.offset) {
      fail<FormatError>("checkpoint.zip.entry_out_of_bounds",
                        "zip entry '" + name + "' (" + std::to_string(uncompressed) +
                            " bytes at offset " + std::to_string(data) +
                            ") runs past the data area, which ends at offset " +
                            std::to_string(dir.offset));
    }
    spans.push_back(Span{local, data_end, std::move(name), data,
                         static_cast<std::uint32_t>(le(cd, at + 16, 4))});
    at += kCentralSize + name_size + extra_size + comment_size;
  }
  if (at != cd.size()) {
    fail<FormatError>("checkpoint.zip.trailing_directory_bytes",
                      "zip central directory has " + std::to_string(cd.size() - at) +
                          " bytes after its last entry");
  }
  if (spans.empty()) fail<FormatError>("checkpoint.zip.empty", "the zip archive is empty");
  const std::string& first_name = spans.front().name;
  const std::size_t slash = first_name.find('/');
  if (slash == std::string::npos) {
    fail<FormatError>(
        "checkpoint.zip.no_folder",
        "zip entry '" + first_name + "' is not in a folder, as torch.save's records are");
  }
  folder_ = folded(first_name.substr(0, slash + 1));
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      fail<FormatError>(
          "checkpoint.zip.overlapping_entries",
          "zip entries '" + spans[i - 1].name + "' and '" + spans[i].name + "' overlap");
    }
  }
  // torch.save with CRC-32s off records 0 for every record; a real CRC of 0 is checked anyway.
  const bool any_crc = std::any_of(spans.begin(), spans.end(), [](const Span& s) { return s.crc; });
  verify_crc32_ = verify_crc32_ && any_crc;
  for (Span& span : spans) {
    std::string key = folded(span.name);
    records_.emplace(std::move(key),
                     ZipRecord{std::move(span.name), span.data, span.end - span.data, span.crc});
  }
  const ZipRecord* version = find(".data/version");
  if (version == nullptr) version = find("version");
  if (version == nullptr)
    fail<FormatError>("checkpoint.zip.no_version", "the archive has no version record");
  constexpr std::uint64_t kMaxVersionRecord = 4096;
  if (version->size > kMaxVersionRecord)
    fail<FormatError>("checkpoint.zip.bad_version", "record '" + version->name + "' is too long");
  const at::DataPtr text = read(*version);
  check_version(std::string(static_cast<const char*>(text.get()), version->size));
}

std::uint64_t ZipArchive::index_bytes() const {
  // Per record a hash node (link, cached hash, the folded name, the record with its name), the
  // two names' heap blocks and two bucket slots; the bucket array once more while it rehashes.
  std::uint64_t bytes = sizeof(*this) + folder_.size() + 1;
  for (const auto& [key, record] : records_) {
    bytes += 16 + sizeof(std::pair<const std::string, ZipRecord>) + key.size() + 1 +
             record.name.size() + 1 + 32;
  }
  return bytes;
}

const ZipRecord* ZipArchive::find(const std::string& name) const {
  auto found = records_.find(folder_ + folded(name));
  return found == records_.end() ? nullptr : &found->second;
}

at::DataPtr ZipArchive::read(const ZipRecord& record) const {
  at::DataPtr data = c10::GetCPUAllocator()->allocate(record.size);
  auto* out = static_cast<unsigned char*>(data.get());
  // Chunks small enough to stay in cache between the copy and the CRC: one pass over memory.
  constexpr std::uint64_t kChunk = 1 << 20;
  std::uint32_t crc = 0;  // libdeflate_crc32's initial value
  for (std::uint64_t done = 0; done < record.size;) {
    const std::uint64_t n = std::min(kChunk, record.size - done);
    read_exactly(in_, record.data + done, out + done, static_cast<std::size_t>(n),
                 ("record '" + record.name + "'").c_str());
    if (verify_crc32_) crc = ::libdeflate_crc32(crc, out + done, static_cast<std::size_t>(n));
    done += n;
  }
  if (verify_crc32_ && crc != record.crc) {
    fail<FormatError>("checkpoint.zip.crc_mismatch",
                      "record '" + record.name + "' fails its CRC-32 check (the file is damaged)");
  }
  return data;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
