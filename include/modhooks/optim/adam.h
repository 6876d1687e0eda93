// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace optim {

/// \addtogroup api_state
/// @{

/// libtorch's `torch::optim::Adam` stepping as Python's `torch.optim.Adam` does: its
/// single-tensor implementation (what Python runs for CPU parameters, or with `foreach=False`),
/// operation for operation, so that training gives Python's parameters bit for bit on the
/// libtorch of Python's version. libtorch's own step updates the first moment with `mul_` and
/// `add_` where Python takes `lerp_`, which moves the parameters by up to a few 1e-8 a step.
///
/// Everything but `step` is libtorch's Adam: its options, its state, `optim::state_dict` and
/// `optim::load_state_dict`, `torch::save`. `AdamOptions` has no `maximize`, `foreach`,
/// `capturable` or `differentiable`; the step is Python's with those at their defaults.
///
/// **Example**:
/// \code
///   modhooks::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
///   loss.backward();
///   adam.step();  // Python's parameters, bit for bit
/// \endcode
class Adam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  /// Python's step; runs `closure` first, with grad enabled, where one is given. Throws
  /// modhooks::Error (RuntimeError `optim.adam.sparse`, Python's message) for a sparse gradient,
  /// before any parameter changes.
  at::Tensor step(LossClosure closure = nullptr) override;
};

/// libtorch's `torch::optim::AdamW` stepping as Python's `torch.optim.AdamW` (Python's Adam with
/// `decoupled_weight_decay=True`), as `Adam` above does for Adam.
class AdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  /// Python's step; as `Adam::step`.
  at::Tensor step(LossClosure closure = nullptr) override;
};

/// @}

}  // namespace optim
MODHOOKS_END_NAMESPACE
