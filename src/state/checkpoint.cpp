// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/state/checkpoint.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "byte_io.h"
#include "dtypes.h"
#include "file_io.h"
#include "formats.h"
#include "modhooks/core/error.h"
#include "modhooks/state/detail/checkpoint_bytes.h"
#include "modhooks/state/object.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

class StringSink final : public Sink {
 public:
  void write(const void* data, std::size_t size) noexcept override {
    if (failed_) return;
    try {
      bytes_.append(static_cast<const char*>(data), size);
    } catch (...) {
      failed_ = true;
    }
  }
  std::string finish() {
    if (failed_) fail("out of memory while writing the checkpoint into memory");
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
  bool failed_ = false;
};

/// Writes next to `path` and renames over it only once everything is written, so a failed
/// save leaves an existing checkpoint untouched.
class FileSink final : public Sink {
 public:
  explicit FileSink(const std::string& path)
      : path_(path), temp_(path + ".modhooks-partial"), file_(std::fopen(temp_.c_str(), "wb")) {
    if (file_ == nullptr) fail("cannot open '" + temp_ + "' for writing: " + std::strerror(errno));
  }
  ~FileSink() override {
    if (file_ != nullptr) {
      std::fclose(file_);
      std::remove(temp_.c_str());
    }
  }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void write(const void* data, std::size_t size) noexcept override {
    if (error_ == 0 && std::fwrite(data, 1, size, file_) != size) error_ = errno ? errno : EIO;
  }
  void finish() {
    std::FILE* file = file_;
    file_ = nullptr;
    if (std::fclose(file) != 0 && error_ == 0) error_ = errno ? errno : EIO;
    if (error_ == 0 && std::rename(temp_.c_str(), path_.c_str()) != 0) error_ = errno;
    if (error_ != 0) {
      std::remove(temp_.c_str());
      fail("cannot write '" + path_ + "': " + std::strerror(error_));
    }
  }

 private:
  std::string path_;
  std::string temp_;
  std::FILE* file_;
  int error_ = 0;
};

void write(const StateDict& state_dict, CheckpointFormat format, Sink& out) {
  if (format == CheckpointFormat::kSafetensors) {
    write_safetensors(state_dict, out);
  } else {
    write_torch_save(state_dict, out);
  }
}

}  // namespace

void check_utf8(const std::string& what, const std::string& text) {
  if (!is_utf8(text, /*surrogates=*/false)) {
    fail(what + " is not valid UTF-8; Python could not read it back");
  }
}

const DtypeNames& checked_dtype(const std::string& key, const at::Tensor& tensor) {
  check_utf8("state dict key '" + key + "'", key);
  if (!tensor.defined()) fail("state dict entry '" + key + "' is an undefined tensor");
  if (tensor.layout() != c10::kStrided || tensor.is_quantized()) {
    fail("state dict entry '" + key + "' is not a dense tensor");
  }
  const DtypeNames* names = find_dtype(tensor.scalar_type());
  if (names == nullptr) {
    fail("state dict entry '" + key + "' has dtype " + c10::toString(tensor.scalar_type()) +
         ", which checkpoints cannot hold");
  }
  // The writers compute contiguous strides and byte sizes from the sizes (empty dimensions
  // counting as 1, as torch's strides do): they must fit in int64, which a stride-0 view of a
  // few bytes can exceed.
  std::uint64_t extent = tensor.element_size();
  for (const std::int64_t size : tensor.sizes()) {
    if (mul_overflows(extent, static_cast<std::uint64_t>(std::max<std::int64_t>(size, 1)),
                      &extent) ||
        extent > static_cast<std::uint64_t>(INT64_MAX)) {
      fail("state dict entry '" + key + "' of size " + c10::str(tensor.sizes()) +
           " is too large to write contiguously");
    }
  }
  return *names;
}

at::Tensor writable_tensor(const at::Tensor& tensor) {
  return tensor.detach().to(c10::kCPU).resolve_conj().resolve_neg().contiguous();
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

StateDict load_from_bytes(std::string_view bytes, CheckpointFormat format,
                          const LoadOptions& options) {
  return with_context("in-memory checkpoint",
                      [&] { return read(MemoryReadAdapter(bytes), format, options); });
}

std::string save_to_bytes(const StateDict& state_dict, CheckpointFormat format) {
  return with_context("in-memory checkpoint", [&] {
    StringSink sink;
    write(state_dict, format, sink);
    return sink.finish();
  });
}

c10::IValue load_object_from_bytes(std::string_view bytes, const LoadOptions& options) {
  return with_context("in-memory checkpoint",
                      [&] { return read_torch_save_object(MemoryReadAdapter(bytes), options); });
}

}  // namespace detail

void save_object(const c10::IValue& object, const std::string& path) {
  detail::with_context("modhooks::save_object('" + path + "')", [&] {
    // A safetensors file holds names to tensors only: the object must be a state dict.
    const bool safetensors =
        detail::format_for_path(path) == detail::CheckpointFormat::kSafetensors;
    const StateDict state_dict = safetensors ? StateDict::from(object) : StateDict();
    detail::FileSink sink(path);
    if (safetensors) {
      detail::write_safetensors(state_dict, sink);
    } else {
      detail::write_torch_save_object(object, sink);
    }
    sink.finish();
  });
}

c10::IValue load_object(const std::string& path, const LoadOptions& options) {
  return detail::with_context("modhooks::load_object('" + path + "')", [&] {
    const detail::CheckpointFile file(path);
    if (detail::format_for_path(path) == detail::CheckpointFormat::kSafetensors) {
      return detail::read_safetensors(file).to_ivalue();
    }
    return detail::read_torch_save_object(file, options);
  });
}

void save(const StateDict& state_dict, const std::string& path) {
  detail::with_context("modhooks::save('" + path + "')",
                       [&] { detail::save_file(state_dict, path); });
}

StateDict load(const std::string& path) { return load(path, LoadOptions()); }

StateDict load(const std::string& path, const LoadOptions& options) {
  return detail::with_context("modhooks::load('" + path + "')", [&] {
    if (detail::is_index_path(path)) return detail::load_index(path, options);
    return detail::read_file(path, options);
  });
}

MODHOOKS_END_NAMESPACE
