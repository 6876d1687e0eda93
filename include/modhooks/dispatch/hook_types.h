// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_register
/// @{

/// Gradients as hooks see them. An undefined tensor stands wherever Python passes None.
using TensorList = std::vector<at::Tensor>;

/// Options of `register_forward_hook` and `register_forward_pre_hook` (Python's keyword
/// arguments), with fluent setters in libtorch's `TORCH_ARG` style. Both options are false by
/// default, as in Python. `register_forward_pre_hook` reads only `prepend`.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_forward_hook(fc, hook,
///       modhooks::ForwardHookOptions().prepend(true).always_call(true));
/// \endcode
class ForwardHookOptions {
 public:
  /// Run this hook before the ones already registered on the module (global hooks still run
  /// first, as in Python). \see \ref api_register
  ForwardHookOptions& prepend(bool value) noexcept {
    prepend_ = value;
    return *this;
  }
  /// Whether the hook goes before the module's others. \see \ref api_register
  bool prepend() const noexcept { return prepend_; }

  /// Run this forward hook even when a pre-hook, `forward` or another forward hook throws.
  /// \see \ref api_register
  ForwardHookOptions& always_call(bool value) noexcept {
    always_call_ = value;
    return *this;
  }
  /// Whether the hook runs also when the call throws. \see \ref api_register
  bool always_call() const noexcept { return always_call_; }

 private:
  bool prepend_ = false;
  bool always_call_ = false;
};

/// @}

MODHOOKS_END_NAMESPACE
