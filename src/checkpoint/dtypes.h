// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <string_view>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How one dtype is spelled in the two checkpoint formats. The table behind these functions is
/// the single list of dtypes modhooks reads and writes.
struct DtypeNames {
  c10::ScalarType type;
  /// `torch.<name>`, the global that pickles a dtype ("float32", "uint16").
  std::string_view torch_name;
  /// The legacy storage class torch.save writes for this dtype ("FloatStorage"); empty for the
  /// dtypes torch.save writes as an UntypedStorage plus the dtype (`_rebuild_tensor_v3`).
  std::string_view storage_class;
  /// The safetensors "dtype" field ("F32"); empty where safetensors has no spelling.
  std::string_view safetensors_name;
};

/// nullptr when the dtype is not one checkpoints can hold.
const DtypeNames* find_dtype(c10::ScalarType type);
const DtypeNames* find_dtype_by_torch_name(std::string_view name);
const DtypeNames* find_dtype_by_storage_class(std::string_view name);
/// Whether `name` is a `torch.<name>` dtype of a newer libtorch than the linked one may be.
bool is_newer_dtype_name(std::string_view name);
const DtypeNames* find_dtype_by_safetensors_name(std::string_view name);

}  // namespace detail
MODHOOKS_END_NAMESPACE
