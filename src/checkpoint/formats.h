// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <string>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/core/error.h"
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

/// Runs `body`, prefixing every message with `context` (the path, or "in-memory checkpoint"):
/// modhooks' errors keep their type and id, libtorch's become a RuntimeError
/// "checkpoint.libtorch".
template <class Body>
auto with_context(const std::string& context, Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    std::rethrow_exception(e.with_message(context + ": " + e.what()));
  } catch (const c10::Error& e) {
    fail<RuntimeError>("checkpoint.libtorch", context + ": " + e.what_without_backtrace());
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
