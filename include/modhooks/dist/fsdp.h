// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <optional>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {

/// \addtogroup api_dist
/// @{

/// Python's `MixedPrecisionPolicy`: the dtype the gathered parameters (and the inputs of the
/// module's forward) take, and the dtype gradients are reduced in. Unset: the parameters' own.
struct MixedPrecisionPolicy {
  /// The dtype of the gathered parameters and of the floating inputs of the module's forward.
  TORCH_ARG(std::optional<c10::ScalarType>, param_dtype) = std::nullopt;
  /// The dtype whole gradients are kept and reduce-scattered in.
  TORCH_ARG(std::optional<c10::ScalarType>, reduce_dtype) = std::nullopt;
};

/// Python's `fully_shard` keywords.
struct FullyShardOptions {
  /// Free the gathered parameters after forward (gather again before backward). Unset: true,
  /// but false for the root (the module whose forward runs first), as Python's default.
  TORCH_ARG(std::optional<bool>, reshard_after_forward) = std::nullopt;
  /// Mixed precision for the group (Python's `mp_policy`).
  TORCH_ARG(MixedPrecisionPolicy, mp_policy) = {};
  /// The group to shard over (Python's one-dimensional `mesh`); null: the default group.
  TORCH_ARG(c10::intrusive_ptr<c10d::ProcessGroup>, process_group) = {};
};

/// Python's `torch.distributed.checkpoint.state_dict.StateDictOptions`, the keywords
/// `get_model_state_dict` and `set_model_state_dict` read.
struct StateDictOptions {
  /// Whole tensors rather than each rank's shards.
  TORCH_ARG(bool, full_state_dict) = false;
  /// With `full_state_dict`: tensors on the CPU, and only on rank 0 (other ranks get an empty
  /// dict).
  TORCH_ARG(bool, cpu_offload) = false;
  /// `set_model_state_dict` with `full_state_dict`: only rank 0's dict is read, its tensors are
  /// broadcast (the other ranks pass an empty dict).
  TORCH_ARG(bool, broadcast_from_rank0) = false;
};

/// @}

namespace detail {
void fully_shard(torch::nn::Module& module, const FullyShardOptions& options);
void set_requires_gradient_sync(torch::nn::Module& module, bool requires_gradient_sync,
                                bool recurse);
void zero_grad(torch::nn::Module& module);
StateDict get_model_state_dict(torch::nn::Module& module, const StateDictOptions& options);
void set_model_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                          const StateDictOptions& options);
}  // namespace detail

/// \addtogroup api_dist
/// @{

/// Python's FSDP2 `fully_shard`: each rank keeps a dim-0 shard of every parameter of `module`
/// not already in a group of a submodule (call it bottom-up, children before their parent). The
/// module's forward, run through `modhooks::call`, sees the whole parameters: a forward pre-hook
/// gathers them (one all-gather for the group; on Gloo one broadcast per rank and parameter,
/// which needs no buffer beside them), a forward hook frees them and hooks the outputs to gather
/// again before backward, and after the group's backward its gradients are reduce-scattered
/// (averaged) onto the shards. `module->parameters()` afterwards are the shards, the tensors an
/// optimizer built afterwards trains; outside the group's forward the modules' members
/// (`linear->weight`) are the shards too, as Python's attributes (a member of your own module where
/// declared with `nn::utils::declare_member` before this call). Every rank must call it on the same
/// model: it checks, with every rank raising the same error.
///
/// **Example**:
/// \code
///   for (auto& block : net->blocks) modhooks::dist::fully_shard(block);
///   modhooks::dist::fully_shard(net);
///   torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
/// \endcode
template <class M, modhooks::detail::IfNnModule<M> = 0>
void fully_shard(M&& module, const FullyShardOptions& options = {}) {
  detail::fully_shard(modhooks::detail::module_ref(module), options);
}

/// Python's `FSDPModule.set_requires_gradient_sync`: with false, backward keeps the whole
/// gradients (accumulating across backwards) instead of reduce-scattering them; the first
/// backward after setting it true again reduces what accumulated. `recurse`: every sharded
/// module under `module` too.
template <class M, modhooks::detail::IfNnModule<M> = 0>
void set_requires_gradient_sync(M&& module, bool requires_gradient_sync, bool recurse = true) {
  detail::set_requires_gradient_sync(modhooks::detail::module_ref(module), requires_gradient_sync,
                                     recurse);
}

/// Sets to none the gradients of the shards under `module` and the whole gradients kept while
/// gradient sync is off (Python's `zero_grad()`, `set_to_none=True`).
template <class M, modhooks::detail::IfNnModule<M> = 0>
void zero_grad(M&& module) {
  detail::zero_grad(modhooks::detail::module_ref(module));
}

/// Python's `get_model_state_dict`: each rank's shards under Python's keys, or with
/// `full_state_dict` the whole tensors (gathered; with `cpu_offload` on rank 0 only).
template <class M, modhooks::detail::IfNnModule<M> = 0>
StateDict get_model_state_dict(M&& module, const StateDictOptions& options = {}) {
  return detail::get_model_state_dict(modhooks::detail::module_ref(module), options);
}

/// Python's `set_model_state_dict`: loads shards (each rank its own), or with `full_state_dict`
/// whole tensors, each rank keeping its shard (with `broadcast_from_rank0`, rank 0's tensors).
/// Every key of the module must be there: a missing or unexpected key or a wrong shape raises
/// before anything is written.
template <class M, modhooks::detail::IfNnModule<M> = 0>
void set_model_state_dict(M&& module, const StateDict& state_dict,
                          const StateDictOptions& options = {}) {
  detail::set_model_state_dict(modhooks::detail::module_ref(module), state_dict, options);
}

/// @}

}  // namespace dist
MODHOOKS_END_NAMESPACE
