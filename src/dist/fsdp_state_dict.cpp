// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// fully_shard's state dicts: Python's get_model_state_dict / set_model_state_dict
// (torch/distributed/checkpoint/state_dict.py) over the groups' shards.
#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dist_detail.h"
#include "fsdp_param.h"
#include "modhooks/dist/fsdp.h"
#include "modhooks/dist/process_group.h"
#include "modhooks/state/module_state.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace detail {

namespace {

using fsdp::ShardedParam;
using ShardRef = std::pair<const fsdp::ShardGroup*, const ShardedParam*>;

/// The sharded parameters under `module` by their key in its state dict.
std::unordered_map<std::string, ShardRef> shards_by_key(
    torch::nn::Module& module, const std::vector<fsdp::ShardGroup>& groups) {
  std::unordered_map<const c10::TensorImpl*, ShardRef> by_impl;
  for (const auto& g : groups) {
    for (const ShardedParam& p : *g.params) {
      by_impl[p.shard.unsafeGetTensorImpl()] = {&g, &p};
      by_impl[p.unsharded.unsafeGetTensorImpl()] = {&g, &p};  // read inside a forward
    }
  }
  std::unordered_map<std::string, ShardRef> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    auto it = by_impl.find(item.value().unsafeGetTensorImpl());
    if (it != by_impl.end()) out.emplace(item.key(), it->second);
  }
  return out;
}

}  // namespace

StateDict get_model_state_dict(torch::nn::Module& module, const StateDictOptions& options) {
  StateDict local = modhooks::state_dict(module);
  if (!options.full_state_dict()) return local;
  const auto groups = fsdp::shard_groups_under(module);
  const int rank = groups.empty() ? get_rank() : groups.front().rank;
  const bool keep = !options.cpu_offload() || rank == 0;
  StateDict full;
  const auto shards = shards_by_key(module, groups);
  torch::NoGradGuard no_grad;
  for (const auto& [key, tensor] : local) {
    at::Tensor value = tensor;
    auto it = shards.find(key);
    if (it != shards.end()) {
      // The whole tensor: this parameter's padded shards gathered from every rank.
      const fsdp::ShardGroup& g = *it->second.first;
      const ShardedParam& p = *it->second.second;
      at::Tensor output = at::empty({p.padded_numel() * g.world}, p.padded.options());
      at::Tensor input = p.padded.reshape({-1}).clone();
      if (g.world > 1) {
        translate("all_gather", [&] { g.group->all_gather_single(output, input)->wait(); });
      } else {
        output.copy_(input);
      }
      std::vector<int64_t> gathered = p.sizes;
      gathered[0] = p.chunk_rows * g.world;
      value = output.view(gathered).narrow(0, 0, p.rows).clone();
    } else {
      value = tensor.detach().clone();
    }
    if (!keep) continue;
    if (options.cpu_offload()) value = value.cpu();
    full.insert_or_assign(key, value);
  }
  return full;
}

namespace {

/// Where the group's tensors live: a NCCL group has no CPU backend.
at::Device group_device(const std::vector<fsdp::ShardGroup>& groups) {
  for (const auto& g : groups) {
    if (!g.params->empty()) return g.params->front().padded.device();
  }
  return at::Device(at::kCPU);
}

}  // namespace

void set_model_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                          const StateDictOptions& options) {
  if (options.broadcast_from_rank0() && !options.full_state_dict()) {
    modhooks::detail::fail<ValueError>(
        "dist.fsdp.broadcast_needs_full",
        "full_state_dict must be True when broadcast_from_rank0 is True.");
  }
  StateDict local = modhooks::state_dict(module);
  const auto groups = fsdp::shard_groups_under(module);
  const int rank = groups.empty() ? get_rank() : groups.front().rank;
  const bool reads = !options.broadcast_from_rank0() || rank == 0;
  const auto shards = shards_by_key(module, groups);
  c10::intrusive_ptr<c10d::ProcessGroup> group =
      groups.empty() ? default_group() : groups.front().group;
  // Every key and shape checked before anything is written. With broadcast_from_rank0 rank 0
  // checks and tells the others, so that every rank raises rather than waits.
  enum Verdict : int64_t { kFits = 0, kKeys = 1, kShape = 2 };
  Verdict verdict = kFits;
  std::string text;
  if (reads) {
    for (const auto& [key, tensor] : local) {
      if (!state_dict.contains(key)) text += " missing '" + key + "'";
    }
    for (const auto& [key, tensor] : state_dict) {
      if (!local.contains(key)) text += " unexpected '" + key + "'";
    }
    if (!text.empty()) verdict = kKeys;
    for (const auto& [key, tensor] : local) {
      if (verdict != kFits) break;
      auto found = shards.find(key);
      const std::vector<int64_t> model = found != shards.end() && options.full_state_dict()
                                             ? found->second.second->sizes
                                             : tensor.sizes().vec();
      const at::Tensor& value = state_dict.at(key);
      if (value.sizes().vec() != model) {
        verdict = kShape;
        text = " '" + key + "' has shape " + c10::str(value.sizes()) + ", the model's is " +
               c10::str(model);
      }
    }
  }
  if (options.broadcast_from_rank0()) {
    std::vector<at::Tensor> flag{
        torch::tensor({static_cast<int64_t>(verdict)}, torch::kInt64).to(group_device(groups))};
    translate("broadcast", [&] { group->broadcast(flag)->wait(); });
    verdict = static_cast<Verdict>(flag[0].item<int64_t>());
    if (!reads && verdict != kFits) text = " (rank 0's does not; its error says how)";
  }
  if (verdict == kKeys) {
    modhooks::detail::fail<KeyError>("dist.fsdp.state_dict_keys",
                                     "modhooks: set_model_state_dict: the state dict does "
                                     "not fit the model:" +
                                         text);
  }
  if (verdict == kShape) {
    modhooks::detail::fail<RuntimeError>("dist.fsdp.state_dict_shape",
                                         "modhooks: set_model_state_dict: the state dict does "
                                         "not fit the model:" +
                                             text);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [key, tensor] : local) {
    auto found = shards.find(key);
    const ShardedParam* p = found == shards.end() ? nullptr : found->second.second;
    const std::vector<int64_t> whole = p ? p->sizes : tensor.sizes().vec();
    at::Tensor value = reads ? state_dict.at(key) : at::Tensor();
    if (options.full_state_dict() && options.broadcast_from_rank0()) {
      at::Tensor buffer = reads ? value.to(tensor.device(), tensor.scalar_type()).contiguous()
                                : at::empty(whole, tensor.options().requires_grad(false));
      std::vector<at::Tensor> tensors{buffer};
      translate("broadcast", [&] { group->broadcast(tensors)->wait(); });
      value = buffer;
    }
    if (p != nullptr && options.full_state_dict()) {
      if (p->local_rows > 0) {
        p->padded.narrow(0, 0, p->local_rows)
            .copy_(value.narrow(0, rank * p->chunk_rows, p->local_rows));
      }
    } else {
      tensor.detach().copy_(value);
    }
  }
}

}  // namespace detail
}  // namespace dist
MODHOOKS_END_NAMESPACE
