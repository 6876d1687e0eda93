// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>

#include "modhooks/state/state_dict.h"

namespace modhooks {

/// Writes `state_dict` to `path`: safetensors when the path ends in ".safetensors", otherwise
/// the zip format of `torch.save`, which Python's `torch.load(path, weights_only=True)` reads
/// back bit-exact as an OrderedDict (with `_metadata` when the state dict has any). Tensors are
/// written contiguous, from CPU copies; views do not keep their storage sharing.
void save(const StateDict& state_dict, const std::string& path);

/// How `load` reads a file.
struct LoadOptions {
  /// Checks every record of a torch.save file against the CRC-32 its zip entry records, in the
  /// same pass that reads it (libdeflate's CRC-32: 256 MiB in 28 ms on a 2-core VM, where a
  /// memcpy of them took 22.5; on a 512 MiB file the check's cost was within the run's noise).
  /// A damaged file then fails naming the record. Files written with
  /// `torch.serialization.set_crc32_options(False)` record no CRC-32s and load unchecked either
  /// way. safetensors files carry no checksums.
  bool verify_crc32 = true;
};

/// Reads a state dict that Python's `torch.save(model.state_dict(), path)` (or `safetensors`'
/// `save_file`, for ".safetensors" paths) wrote. Tensors land on the CPU whatever device they
/// were saved from; views keep sharing their storage. Only the objects a state dict is made of
/// are accepted (allow-listed pickle globals); anything else, and any corrupt or truncated file,
/// raises modhooks::Error naming the path and what was wrong. It is not `torch.load`: a file
/// whose object is not a dict of names to dense tensors (a checkpoint that also holds an
/// optimizer, a `_extra_state` entry), the legacy non-zip format and compressed archives are
/// refused.
StateDict load(const std::string& path);
StateDict load(const std::string& path, const LoadOptions& options);

}  // namespace modhooks
