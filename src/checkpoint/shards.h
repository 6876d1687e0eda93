// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

// Sharded checkpoints by their index: above one file (files.h), below the public functions.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Whether `path` names an index of shards ("model.safetensors.index.json",
/// "pytorch_model.bin.index.json"): it ends in ".index.json".
bool is_index_path(const std::string& path);

/// `load` of an index: every shard it names, in one state dict.
StateDict load_index(const std::string& path, const LoadOptions& options);

/// Writes `state_dict` as shards of at most `max_shard_size` bytes (a tensor larger than that has
/// a shard of its own) beside the index at `path`, named as Hugging Face names them.
void save_index(const StateDict& state_dict, const std::string& path, std::uint64_t max_shard_size);

}  // namespace detail
MODHOOKS_END_NAMESPACE
