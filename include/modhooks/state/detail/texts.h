// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

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

}  // namespace detail
MODHOOKS_END_NAMESPACE
