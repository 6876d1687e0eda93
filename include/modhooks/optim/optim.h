// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>

#include "modhooks/version.h"

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

MODHOOKS_BEGIN_NAMESPACE
namespace optim {

/// \addtogroup api_state
/// @{

/// Python's `optimizer.load_state_dict(state)` for libtorch's SGD, Adam, AdamW, RMSprop and
/// Adagrad, from the state as `load_object` returns it:
///
///     c10::IValue ckpt = modhooks::load_object("train.pt");
///     torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions());
///     modhooks::optim::load_state_dict(adam, ckpt.toGenericDict().at("optimizer"));
///
/// `state` has Python's layout: "state" maps parameter indices (numbered over the groups in
/// order) to per-parameter state, "param_groups" lists the groups with their "params" indices
/// and hyper-parameters. Every group's hyper-parameters that libtorch's optimizer has are
/// restored (lr, momentum, betas, ...); Python's implementation choices (foreach, fused,
/// capturable, differentiable) are ignored. Per-parameter state tensors are copied, converted
/// to the parameter's dtype and device as Python converts them; Python's `step` tensors become
/// libtorch's integer step. Indices the groups do not name are skipped.
///
/// Throws modhooks::Error, leaving the optimizer unchanged, when the number of groups or a
/// group's size differs (Python's messages), when a state tensor's shape is not its
/// parameter's, when state a step needs is missing, or when a hyper-parameter asks for what
/// libtorch's optimizer cannot do (maximize; decoupled weight decay naming the other one of
/// libtorch's Adam and AdamW). docs/state.md lists how libtorch's steps differ from Python's.
void load_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& state);

/// Python's `optimizer.state_dict()` of libtorch's SGD, Adam, AdamW, RMSprop or Adagrad: a dict
/// {"state": {index: {name: tensor}}, "param_groups": [{hyper-parameters..., "params": [...]}]}
/// with Python's names, in the order Python gives an optimizer made with one set of options,
/// which Python's `load_state_dict` takes
/// (`modhooks::save_object` writes it). The hyper-parameters libtorch lacks get the values that
/// describe libtorch's step (maximize False, foreach and fused None, ...); `step` is a float32
/// scalar tensor as in Python. Like Python's, the state tensors are the optimizer's own, not
/// copies. Throws modhooks::Error for other optimizers.
///
/// **Example**:
/// \code
///   c10::impl::GenericDict ckpt(c10::StringType::get(), c10::AnyType::get());
///   ckpt.insert("optimizer", modhooks::optim::state_dict(adam));
///   modhooks::save_object(ckpt, "train.pt");  // Python's optimizer.load_state_dict reads it
/// \endcode
c10::IValue state_dict(const torch::optim::Optimizer& optimizer);

/// @}

}  // namespace optim
MODHOOKS_END_NAMESPACE
