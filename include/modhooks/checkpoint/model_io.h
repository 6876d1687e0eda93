// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/registration/detail/module_ref.h"
#include "modhooks/state/detail/load.h"
#include "modhooks/state/module_state.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The module's `load_state_dict`, which `load_model` runs on the file's tensors, copying with
/// `copy`.
using LoadStateDict =
    std::function<IncompatibleKeys(const StateDict&, bool strict, TensorCopy& copy)>;

IncompatibleKeys load_model(const std::string& path, bool strict, const LoadOptions& options,
                            const LoadStateDict& load_state_dict);
void save_model(const StateDict& state_dict, const std::string& path,
                std::optional<std::uint64_t> max_shard_size);

}  // namespace detail

/// \addtogroup api_state
/// @{

/// Loads a checkpoint file straight into `module`'s own tensors: a safetensors file, a
/// torch.save file (`.pt`, `.bin`, any other name) or an index of shards
/// (`model.safetensors.index.json`, `pytorch_model.bin.index.json`). It is `load_state_dict`
/// (its hooks, strictness, error texts, all-or-nothing) on the file's tensors, without a copy of
/// them in memory: the file is mapped, every header, key, shape and dtype is checked (and, for a
/// torch.save file, every CRC-32 the load will use, unless `options.verify_crc32` is false)
/// before the first write, then each tensor's bytes are read from the file into the parameter's
/// memory (through a small pinned buffer for CUDA tensors). What it holds beside the model is
/// bounded (docs/state.md), except that load post-hooks make it keep the former values, as
/// `load_state_dict` does, to undo the load if they fail it. `module` is anything the
/// `register_*` functions take.
///
/// **Example**:
/// \code
///   modhooks::load_model(net, "model.safetensors");
///   modhooks::IncompatibleKeys keys =
///       modhooks::load_model(net, "pytorch_model.bin.index.json", /*strict=*/false);
/// \endcode
template <class M,
          class = decltype(load_state_dict(std::declval<M&>(), std::declval<StateDict&>()))>
IncompatibleKeys load_model(M&& module, const std::string& path, bool strict = true,
                            const LoadOptions& options = LoadOptions()) {
  return detail::load_model(path, strict, options,
                            [&](const StateDict& sd, bool s, detail::TensorCopy& copy) {
                              return detail::load_state_dict(detail::module_ref(module), sd, s,
                                                             /*assign=*/false, &copy);
                            });
}

/// Writes `state_dict(module)` (its hooks fire) to `path`, by its extension as `save` does,
/// without copying the module's CPU tensors. A path ending in ".index.json" is refused here:
/// a sharded checkpoint needs its `max_shard_size`.
///
/// **Example**:
/// \code
///   modhooks::save_model(net, "model.safetensors");
/// \endcode
template <class M, class = decltype(state_dict(std::declval<M&>()))>
void save_model(M&& module, const std::string& path) {
  detail::save_model(state_dict(module), path, std::nullopt);
}

/// Writes a sharded checkpoint as Hugging Face's `save_pretrained` does: `path` names the index
/// ("model.safetensors.index.json" gives shards "model-00001-of-00003.safetensors" beside it,
/// "pytorch_model.bin.index.json" gives torch.save shards "pytorch_model-00001-of-00002.bin"),
/// tensors in state-dict order, a new shard started when the next tensor would take the shard
/// past `max_shard_size` bytes (a larger tensor gets a shard of its own). The index is written
/// last: {"metadata": {"total_size": bytes}, "weight_map": {key: shard}}.
///
/// **Example**:
/// \code
///   modhooks::save_model(net, "model.safetensors.index.json", std::uint64_t{2} << 30);  // 2 GiB
/// \endcode
template <class M, class = decltype(state_dict(std::declval<M&>()))>
void save_model(M&& module, const std::string& path, std::uint64_t max_shard_size) {
  detail::save_model(state_dict(module), path, max_shard_size);
}

/// @}

MODHOOKS_END_NAMESPACE
