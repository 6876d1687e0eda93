// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>

#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// Writes `state_dict` to `path`: safetensors when the path ends in ".safetensors", otherwise
/// the zip format of `torch.save`, which Python's `torch.load(path, weights_only=True)` reads
/// back bit-exact as an OrderedDict (with `_metadata` when the state dict has any). Tensors are
/// written contiguous, from CPU copies; views do not keep their storage sharing.
///
/// **Example**:
/// \code
///   modhooks::save(modhooks::state_dict(net), "net.pt");  // torch.load("net.pt") reads it
///   modhooks::save(modhooks::state_dict(net), "net.safetensors");
/// \endcode
void save(const StateDict& state_dict, const std::string& path);

/// How `load` reads a file.
///
/// **Example**:
/// \code
///   modhooks::LoadOptions options;
///   options.verify_crc32 = false;
///   modhooks::StateDict sd = modhooks::load("net.pt", options);
/// \endcode
struct LoadOptions {
  /// Checks every record of a torch.save file against the CRC-32 its zip entry records, in the
  /// same pass that reads it, so each byte is read once (libdeflate's CRC-32; docs/state.md says
  /// what it costs). A damaged file then fails naming the record. Files written with
  /// `torch.serialization.set_crc32_options(False)` record no CRC-32s and load unchecked either
  /// way. safetensors files carry no checksums.
  bool verify_crc32 = true;
  /// Returns tensors backed by a read-only memory mapping of the file instead of reading them,
  /// as Python's `torch.load(mmap=True)` does: `load` then reads the header (and a torch.save
  /// file's pickle) only, and a tensor's pages are read from the file when first touched. The
  /// mapping lives as long as the storage of any tensor viewing it. The tensors are read-only:
  /// writing into one (`add_`, `copy_` into it, a `load_state_dict(..., assign=true)` that swaps
  /// it into a model that is then trained) kills the process with SIGSEGV; copy them first
  /// (`clone()`) to write. Mapped records are not CRC-32 checked (nothing is read to check); a
  /// file truncated while mapped kills a process that touches the lost pages with SIGBUS.
  /// Records that cannot be mapped are read as without it: those not aligned to their element
  /// size (safetensors tensors after an odd-sized one), and those of big-endian torch.save files.
  bool mmap = false;
};

/// Reads a state dict that Python's `torch.save(model.state_dict(), path)` (or `safetensors`'
/// `save_file`, for ".safetensors" paths) wrote. Tensors land on the CPU whatever device they
/// were saved from; views keep sharing their storage. Only the objects a state dict is made of
/// are accepted (allow-listed pickle globals); anything else, and any corrupt or truncated file,
/// raises modhooks::Error naming the path and what was wrong. It is not `torch.load`: a file
/// whose object is not a dict of names to dense tensors (a checkpoint that also holds an
/// optimizer, a `_extra_state` entry: `load_object` reads those) and compressed archives are
/// refused. The legacy non-zip format (`_use_new_zipfile_serialization=False`) is read too.
///
/// An index of shards ("model.safetensors.index.json", "pytorch_model.bin.index.json", as
/// Hugging Face's `save_pretrained` writes them) loads every shard it names, in its folder, into
/// one state dict; a key the index maps to a shard that lacks it, a shard's key the index does
/// not map to that shard, and a key in two shards are errors.
///
/// **Example**:
/// \code
///   modhooks::StateDict sd = modhooks::load("net.pt");  // torch.save(net.state_dict(), ...)
///   modhooks::load_state_dict(net, sd);
/// \endcode
StateDict load(const std::string& path);
/// The same, read as `options` says.
///
/// **Example**:
/// \code
///   modhooks::LoadOptions options;
///   options.verify_crc32 = false;
///   modhooks::StateDict sd = modhooks::load("net.pt", options);
/// \endcode
StateDict load(const std::string& path, const LoadOptions& options);

/// @}

MODHOOKS_END_NAMESPACE
