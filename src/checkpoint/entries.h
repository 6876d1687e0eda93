// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "dtypes.h"
#include "modhooks/version.h"

// What both writers check of each entry they write, and the tensor whose bytes they write: a
// leaf that the codecs call and that calls none of them.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

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
