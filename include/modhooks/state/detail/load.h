// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "modhooks/state/module_state.h"
#include "modhooks/version.h"

// `load_state_dict` with another way of copying: what the checkpoint room's `load_model` passes
// to the state room's traversal. Not part of the API.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How a load writes a checkpoint tensor's values into a model tensor, in place of `copy_`.
class TensorCopy {
 public:
  virtual ~TensorCopy() = default;
  /// Called after every check of the load (those of `copy_`'s failures included) and before its
  /// first write, with each (model tensor, checkpoint tensor) pair the load will copy: what is
  /// left to check for this way of copying (CRC-32s) is checked here, and what it throws fails
  /// the load with nothing written.
  virtual void prepare(const std::vector<std::pair<at::Tensor, at::Tensor>>& copies) = 0;
  /// Writes `source`'s values into `target`, whose shape is the same.
  virtual void copy(const at::Tensor& target, const at::Tensor& source) = 0;
};

/// `load_state_dict(module, state_dict, strict, assign)` copying through `copy` (null: `copy_`).
/// A `load_state_dict` that a hook of this load calls copies with `copy_`: the strategy is this
/// call's argument, not state of the thread.
IncompatibleKeys load_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign, TensorCopy* copy);
IncompatibleKeys load_state_dict(const torch::jit::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign, TensorCopy* copy);

}  // namespace detail
MODHOOKS_END_NAMESPACE
