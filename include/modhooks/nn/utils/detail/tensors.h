// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

// What the nn utilities share: Python's attribute edits on a torch::nn module (a parameter moved
// out of `_parameters`, a plain tensor attribute that a hook recomputes), which libtorch has no
// calls for.

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {

/// What a utility returns: the module as given, an lvalue by reference and a temporary by value
/// (Python returns the module, so `Sequential(spectral_norm(Conv2d(...)))` reads as it does
/// there, and nothing dangles).
template <class M>
using Returned = std::conditional_t<std::is_lvalue_reference_v<M>, M, std::decay_t<M>>;

using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

/// The module's own tables, which libtorch keeps private and has no calls to remove from (the
/// nn utilities and `dist::fully_shard` put other tensors in a module's parameter table).
TensorDict& parameters_of(torch::nn::Module& module);
TensorDict& buffers_of(torch::nn::Module& module);
torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>& children_of(
    torch::nn::Module& module);

/// Python's `getattr(module, name)` for tensors: the parameter, the buffer, or the tensor
/// attribute a utility keeps recomputed, in that order; undefined when there is none.
at::Tensor find_tensor(torch::nn::Module& module, const std::string& name);

/// `find_tensor`, or Python's AttributeError "'Linear' object has no attribute 'name'".
at::Tensor get_tensor(torch::nn::Module& module, const std::string& name);

/// Python's repr of a module in error texts (libtorch's pretty print: `torch::nn::Linear(...)`).
std::string module_repr(const torch::nn::Module& module);

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
