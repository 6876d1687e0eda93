// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A contiguous CPU tensor as a runtime other than libtorch describes it, in plain memory, sizes
/// and a dtype number (c10's `ScalarType`): what passes between a unit that has such a runtime's
/// headers (ExecuTorch's copies of c10's redefine libtorch's) and libtorch's units.
struct TensorView {
  static constexpr std::size_t kMaxDim = 16;  // ExecuTorch's kTensorDimensionLimit
  void* data = nullptr;
  std::int8_t dtype = 0;
  std::size_t dim = 0;
  std::array<std::int64_t, kMaxDim> sizes{};
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
