// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <memory>
#include <string>

#include "modhooks/core/error.h"
#include "modhooks/state/checkpoint.h"
#include "modhooks/state/detail/checkpoint_bytes.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Where a writer puts a file's bytes, in order. `write` never throws: libtorch's zip writer
/// calls it through C code that an exception must not cross, so a failure is remembered and
/// reported afterwards by the owner of the sink.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* data, std::size_t size) noexcept = 0;
};

class MappedFile;

/// The torch.save zip format: an OrderedDict pickle in data.pkl, one record per storage.
/// With `mapped` (a mapping of the file `in` reads), a record stored at an offset aligned to its
/// element size, in a little-endian file, becomes a storage over the mapping (mapped_storage),
/// neither read nor checked here; its MappedRecord carries the CRC-32 when the archive is
/// checked. Other records are read as without it.
StateDict read_torch_save(const caffe2::serialize::ReadAdapterInterface& in,
                          const LoadOptions& options,
                          const std::shared_ptr<const MappedFile>& mapped = nullptr);
void write_torch_save(const StateDict& state_dict, Sink& out);

/// The same format holding any weights-only object (load_object / save_object); see
/// unpickle_object for what the reader returns and ObjectPickler for what the writer takes.
c10::IValue read_torch_save_object(const caffe2::serialize::ReadAdapterInterface& in,
                                   const LoadOptions& options);
void write_torch_save_object(const c10::IValue& object, Sink& out);

/// safetensors: an 8-byte header length, a JSON header, then the tensors' bytes back to back.
/// With `mapped`, tensors aligned to their element size view the mapping, as above.
StateDict read_safetensors(const caffe2::serialize::ReadAdapterInterface& in,
                           const std::shared_ptr<const MappedFile>& mapped = nullptr);
void write_safetensors(const StateDict& state_dict, Sink& out);

/// The reader of `format`.
StateDict read(const caffe2::serialize::ReadAdapterInterface& in, CheckpointFormat format,
               const LoadOptions& options,
               const std::shared_ptr<const MappedFile>& mapped = nullptr);

/// `load` of one file (not an index), mapped when `options.mmap`.
StateDict read_file(const std::string& path, const LoadOptions& options);

/// `save` of one file, without the error's context; `save_text` writes `text` the same way
/// (next to `path`, renamed over it once complete).
void save_file(const StateDict& state_dict, const std::string& path);
void save_text(const std::string& text, const std::string& path);

/// Whether `path` names an index of shards ("model.safetensors.index.json",
/// "pytorch_model.bin.index.json"): it ends in ".index.json".
bool is_index_path(const std::string& path);

/// `load` of an index: every shard it names, in one state dict (model_io.cpp).
StateDict load_index(const std::string& path, const LoadOptions& options);

/// Runs `body`, turning libtorch's errors into modhooks::Error and prefixing every message
/// with `context` (the path, or "in-memory checkpoint").
template <class Body>
auto with_context(const std::string& context, Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  } catch (const c10::Error& e) {
    throw Error(context + ": " + e.what_without_backtrace());
  }
}

struct DtypeNames;

/// Fails unless `text` (a key, named by `what` in the error) is UTF-8, as Python's str is.
void check_utf8(const std::string& what, const std::string& text);

/// The dtype entry of a tensor `save` can write; throws modhooks::Error naming the key for
/// tensors no checkpoint can hold (undefined, sparse, quantized, of an unknown dtype, too large
/// to write contiguously) and for keys that are not UTF-8.
const DtypeNames& checked_dtype(const std::string& key, const at::Tensor& tensor);

/// The tensor `save` writes for `key`: on the CPU, contiguous, conjugation and negation
/// resolved, so its bytes from `data_ptr()` are the record.
at::Tensor writable_tensor(const at::Tensor& tensor);

}  // namespace detail
MODHOOKS_END_NAMESPACE
