// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/checkpoint/checkpoint.h"

#include <string>
#include <utility>

#include "byte_io.h"
#include "file_io.h"
#include "files.h"
#include "formats.h"
#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/checkpoint/object.h"
#include "modhooks/core/error.h"
#include "shards.h"

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
    if (failed_)
      fail<RuntimeError>("checkpoint.save.out_of_memory",
                         "out of memory while writing the checkpoint into memory");
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
  bool failed_ = false;
};

}  // namespace

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
