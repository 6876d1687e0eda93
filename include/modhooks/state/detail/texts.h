// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// `torch.Size([2, 3])`, as Python prints shapes in its errors (state-dict loads, nn utils).
inline std::string torch_size(c10::ArrayRef<std::int64_t> sizes) {
  std::string text = "torch.Size([";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "])";
}

/// Python's `str(dtype)`: "torch.float32" (nn utils' errors; msprobe matches dtypes by it).
inline std::string python_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat:
      return "torch.float32";
    case c10::kDouble:
      return "torch.float64";
    case c10::kHalf:
      return "torch.float16";
    case c10::kBFloat16:
      return "torch.bfloat16";
    case c10::kLong:
      return "torch.int64";
    case c10::kInt:
      return "torch.int32";
    case c10::kShort:
      return "torch.int16";
    case c10::kChar:
      return "torch.int8";
    case c10::kByte:
      return "torch.uint8";
    case c10::kBool:
      return "torch.bool";
    case c10::kComplexFloat:
      return "torch.complex64";
    case c10::kComplexDouble:
      return "torch.complex128";
    case c10::kComplexHalf:
      return "torch.complex32";
    default:
      return std::string("torch.") + c10::toString(type);
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
