// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

CheckpointFile::CheckpointFile(const std::string& path)
    : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
  if (fd_ < 0)
    fail<RuntimeError>("checkpoint.io.open_failed",
                       std::string("cannot open the file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    fail<RuntimeError>("checkpoint.io.stat_failed",
                       std::string("cannot stat the file: ") + std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail<RuntimeError>("checkpoint.io.not_a_file",
                       S_ISDIR(st.st_mode) ? "it is a directory, not a checkpoint file"
                                           : "it is not a regular file (a FIFO, socket or device)");
  }
  size_ = static_cast<std::size_t>(st.st_size);
}

CheckpointFile::~CheckpointFile() { ::close(fd_); }

std::size_t CheckpointFile::read(std::uint64_t pos, void* buf, std::size_t n,
                                 const char* /*what*/) const {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(pos + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  return std::shared_ptr<const MappedFile>(new MappedFile(path));
}

MappedFile::MappedFile(const std::string& path) : file_(path) {
  if (file_.size() == 0) return;  // nothing to map; every reader fails on an empty file
  void* p = ::mmap(nullptr, file_.size(), PROT_READ, MAP_PRIVATE, file_.fd(), 0);
  if (p == MAP_FAILED)
    fail<RuntimeError>("checkpoint.io.map_failed",
                       std::string("cannot map the file: ") + std::strerror(errno));
  data_ = static_cast<char*>(p);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, file_.size());
}

void MappedFile::release(const void* p, std::size_t n) const noexcept {
  static const auto kPage = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + kPage - 1) / kPage * kPage;
  const std::uintptr_t last = (begin + n) / kPage * kPage;
  // The page-aligned bounds are computed as integers: madvise takes whole pages.
  if (last > first) {
    ::madvise(reinterpret_cast<void*>(first),  // NOLINT(performance-no-int-to-ptr)
              last - first, MADV_DONTNEED);
  }
}

namespace {

void delete_record(void* context) { delete static_cast<MappedRecord*>(context); }

}  // namespace

c10::Storage mapped_storage(MappedRecord record) {
  const std::uint64_t size = record.size;
  char* bytes = const_cast<char*>(record.file->data()) + record.offset;  // never written
  auto owned = std::make_unique<MappedRecord>(std::move(record));
  // The DataPtr owns the record from here (its constructor cannot throw).
  c10::DataPtr data(bytes, owned.release(), &delete_record, c10::Device(c10::kCPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<std::int64_t>(size),
                      std::move(data), /*allocator=*/nullptr, /*resizable=*/false);
}

const MappedRecord* mapped_record(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get_deleter() != &delete_record) return nullptr;
  return static_cast<const MappedRecord*>(data.get_context());
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
