// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "files.h"

#include <cerrno>
#include <cstring>
#include <string_view>

#include "file_io.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

FileSink::FileSink(const std::string& path)
    : path_(path), temp_(path + ".modhooks-partial"), file_(std::fopen(temp_.c_str(), "wb")) {
  if (file_ == nullptr)
    fail<RuntimeError>("checkpoint.io.open_failed",
                       "cannot open '" + temp_ + "' for writing: " + std::strerror(errno));
}

FileSink::~FileSink() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_.c_str());
  }
}

void FileSink::write(const void* data, std::size_t size) noexcept {
  if (error_ == 0 && std::fwrite(data, 1, size, file_) != size) error_ = errno ? errno : EIO;
}

void FileSink::finish() {
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0 && error_ == 0) error_ = errno ? errno : EIO;
  if (error_ == 0 && std::rename(temp_.c_str(), path_.c_str()) != 0) error_ = errno;
  if (error_ != 0) {
    std::remove(temp_.c_str());
    fail<RuntimeError>("checkpoint.io.write_failed",
                       "cannot write '" + path_ + "': " + std::strerror(error_));
  }
}

CheckpointFormat format_for_path(const std::string& path) {
  static constexpr std::string_view kExtension = ".safetensors";
  const bool safetensors =
      path.size() >= kExtension.size() &&
      path.compare(path.size() - kExtension.size(), kExtension.size(), kExtension.data()) == 0;
  return safetensors ? CheckpointFormat::kSafetensors : CheckpointFormat::kTorchSave;
}

StateDict read(const caffe2::serialize::ReadAdapterInterface& in, CheckpointFormat format,
               const LoadOptions& options, const std::shared_ptr<const MappedFile>& mapped) {
  if (format == CheckpointFormat::kSafetensors) return read_safetensors(in, mapped);
  return read_torch_save(in, options, mapped);
}

void write(const StateDict& state_dict, CheckpointFormat format, Sink& out) {
  if (format == CheckpointFormat::kSafetensors) {
    write_safetensors(state_dict, out);
  } else {
    write_torch_save(state_dict, out);
  }
}

StateDict read_file(const std::string& path, const LoadOptions& options) {
  if (!options.mmap) return read(CheckpointFile(path), format_for_path(path), options);
  const auto mapped = MappedFile::open(path);
  return read(mapped->file(), format_for_path(path), options, mapped);
}

void save_file(const StateDict& state_dict, const std::string& path) {
  FileSink sink(path);
  write(state_dict, format_for_path(path), sink);
  sink.finish();
}

void save_text(const std::string& text, const std::string& path) {
  FileSink sink(path);
  sink.write(text.data(), text.size());
  sink.finish();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
