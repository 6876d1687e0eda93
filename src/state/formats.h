// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <string>

#include "modhooks/state/checkpoint.h"
#include "modhooks/state/state_dict.h"

namespace modhooks {
namespace detail {

/// Where a writer puts a file's bytes, in order. `write` never throws: libtorch's zip writer
/// calls it through C code that an exception must not cross, so a failure is remembered and
/// reported afterwards by the owner of the sink.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* data, std::size_t size) noexcept = 0;
};

/// The torch.save zip format: an OrderedDict pickle in data.pkl, one record per storage.
StateDict read_torch_save(const caffe2::serialize::ReadAdapterInterface& in,
                          const LoadOptions& options);
void write_torch_save(const StateDict& state_dict, Sink& out);

/// safetensors: an 8-byte header length, a JSON header, then the tensors' bytes back to back.
StateDict read_safetensors(const caffe2::serialize::ReadAdapterInterface& in);
void write_safetensors(const StateDict& state_dict, Sink& out);

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
}  // namespace modhooks
