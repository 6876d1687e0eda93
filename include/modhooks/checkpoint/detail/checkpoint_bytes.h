// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <string_view>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

enum class CheckpointFormat { kTorchSave, kSafetensors };

/// The format `save` and `load` pick for `path`: safetensors for the ".safetensors" extension.
CheckpointFormat format_for_path(const std::string& path);

/// `load` on an in-memory file: the entry point fuzzers and corruption tests drive. Every size
/// and count is checked against the bytes present before anything is allocated, so hostile input
/// ends in modhooks::Error, never in a crash or an allocation beyond the input's size.
StateDict load_from_bytes(std::string_view bytes, CheckpointFormat format,
                          const LoadOptions& options = {});

/// `load_object` on an in-memory torch.save file, under the same checks and budget.
c10::IValue load_object_from_bytes(std::string_view bytes, const LoadOptions& options = {});

/// `save` into memory: the file's bytes.
std::string save_to_bytes(const StateDict& state_dict, CheckpointFormat format);

}  // namespace detail
MODHOOKS_END_NAMESPACE
