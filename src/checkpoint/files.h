// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstdio>
#include <memory>
#include <string>

#include "formats.h"
#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

// One checkpoint file, by its format: above the codecs, below shards and the public functions.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class MappedFile;

/// Writes next to `path` and renames over it only once everything is written, so a failed
/// save leaves an existing checkpoint untouched.
class FileSink final : public Sink {
 public:
  explicit FileSink(const std::string& path);
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void write(const void* data, std::size_t size) noexcept override;
  /// Closes the file and renames it over `path`; throws what went wrong.
  void finish();

 private:
  std::string path_;
  std::string temp_;
  std::FILE* file_;
  int error_ = 0;
};

/// The reader of `format`.
StateDict read(const caffe2::serialize::ReadAdapterInterface& in, CheckpointFormat format,
               const LoadOptions& options,
               const std::shared_ptr<const MappedFile>& mapped = nullptr);

/// The writer of `format`.
void write(const StateDict& state_dict, CheckpointFormat format, Sink& out);

/// `load` of one file (not an index), mapped when `options.mmap`.
StateDict read_file(const std::string& path, const LoadOptions& options);

/// `save` of one file, without the error's context; `save_text` writes `text` the same way
/// (next to `path`, renamed over it once complete).
void save_file(const StateDict& state_dict, const std::string& path);
void save_text(const std::string& text, const std::string& path);

}  // namespace detail
MODHOOKS_END_NAMESPACE
