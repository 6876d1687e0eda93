// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

// What fully_shard's groups show of their parameters beyond fsdp.cpp: the state-dict functions
// (fsdp_state_dict.cpp) read and write the shards through these.

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace detail {
namespace fsdp {

namespace ud = nn::utils::detail;

/// One parameter of a group: Python's FSDPParam.
struct ShardedParam {
  torch::nn::Module* owner = nullptr;  ///< the module whose table holds it
  std::string name;                    ///< its key there
  /// The module's member for this parameter (Python's attribute), where the module has one
  /// that `find_member` knows: it holds `unsharded` while the group is gathered and `shard`
  /// otherwise, as the parameter table does (Python's `_setattr_on_modules`).
  ud::Member member;
  /// The tensor the module held at fully_shard, kept as the whole parameter (Python's
  /// `_unsharded_param`): a view of `gathered` while the group is gathered, a view of the shard
  /// otherwise, so that a handle to it taken before fully_shard never reads freed storage. It
  /// keeps its TensorImpl and version counter, so what autograd saved of it reads the next
  /// gather.
  at::Tensor unsharded;
  /// `chunk_rows * world` rows, `unsharded`'s storage while gathered, with a version counter of
  /// its own: the gather writes through it without changing what autograd checks of
  /// `unsharded`. Its storage is freed between gathers; views of it autograd saved keep it.
  at::Tensor gathered;
  at::Tensor padded;  ///< this rank's shard padded to `chunk_rows` (Python's _sharded_param_data)
  at::Tensor shard;   ///< `padded`'s first `local_rows` rows: the registered parameter
  std::vector<int64_t> sizes;  ///< the whole parameter's
  int64_t rows = 0, chunk_rows = 0, local_rows = 0, row_numel = 0;
  /// Python's `unsharded_grad_dtype`: `mp_policy`'s reduce dtype, else the parameter's own.
  /// The whole parameter's gradient is kept in it (Python's `grad_dtype`), so gradients kept
  /// across unsynced backwards add up in it.
  c10::ScalarType grad_dtype = at::kFloat;

  int64_t padded_numel() const { return chunk_rows * row_numel; }
  std::size_t gathered_bytes(int world) const {
    return static_cast<std::size_t>(padded_numel() * world) * gathered.element_size();
  }
};

/// One fully_shard group as the state-dict functions see it: its rank and world in its process
/// group, and its parameters.
struct ShardGroup {
  int rank = 0;
  int world = 1;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  const std::vector<ShardedParam>* params = nullptr;
};

/// The groups of fully_shard calls under `module` (itself included), each once.
std::vector<ShardGroup> shard_groups_under(torch::nn::Module& module);

}  // namespace fsdp
}  // namespace detail
}  // namespace dist
MODHOOKS_END_NAMESPACE
