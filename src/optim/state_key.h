// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The optimizer's state key of a parameter: its TensorImpl, which libtorch 2.x keys by
/// address and libtorch 1.13 by the address's text.
template <class Map>
typename Map::key_type state_key(const Map& /*state*/, const at::Tensor& param) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream text;
    text << param.unsafeGetTensorImpl();
    return text.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
