// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

/// Where a module's forward reads one of its tensors: a member of its class
/// (`LinearImpl::weight`), or an entry of an RNN's `flat_weights_`, a vector that `to()`
/// rebuilds, so the entry is found anew at each use. The nn utilities and `dist::fully_shard`
/// assign it, as Python's `setattr(module, name, value)`.
class Member {
 public:
  Member() = default;
  explicit Member(at::Tensor* tensor) : tensor_(tensor) {}
  Member(std::vector<at::Tensor>* list, std::size_t index) : list_(list), index_(index) {}
  explicit operator bool() const noexcept { return tensor_ != nullptr || list_ != nullptr; }
  /// Whether it is an entry of an RNN's flat weights.
  bool in_flat_weights() const noexcept { return list_ != nullptr; }
  /// The member itself (Python's plain attribute `module.<name>`).
  at::Tensor& get() const;

 private:
  at::Tensor* tensor_ = nullptr;
  std::vector<at::Tensor>* list_ = nullptr;
  std::size_t index_ = 0;
};

/// The names of an RNN's flat weights in their order (Python's `_flat_weights_names`); empty
/// where `module` is none of libtorch's RNNs.
std::vector<std::string> flat_weight_names(torch::nn::Module& module);

/// The member `module`'s forward reads as `name`: one given to `declare_member`, else one of
/// libtorch's layers' members; empty where there is none.
Member find_member(torch::nn::Module& module, const std::string& name);

/// Python's repr of a module in error texts (libtorch's pretty print: `torch::nn::Linear(...)`).
std::string module_repr(const torch::nn::Module& module);

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
