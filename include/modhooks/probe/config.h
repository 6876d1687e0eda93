// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {

/// \addtogroup api_probe
/// @{

/// What to dump: msprobe's `config.json`, with its names. msprobe reads `scope`, `list`,
/// `data_mode` and `summary_mode` from the section named after the task (`"statistics": {...}`);
/// here they are flat members. `Config{}` holds msprobe's defaults (its own config.json's),
/// which a C++ run cannot use as they are: msprobe's default level is `L1`, which modhooks does
/// not dump, so set `level = "L0"`.
///
/// **Example**:
/// \code
///   modhooks::probe::Config config;
///   config.task = "statistics";
///   config.summary_mode = "md5";
///   config.level = "L0";
///   config.dump_path = "dump";
///   config.step = {0, 1};
/// \endcode
struct Config {
  /// "statistics" or "tensor" (msprobe's other tasks are refused by `validate`).
  std::string task = "statistics";
  /// The folder under which `step<N>/rank<R>/` (or `proc<pid>/`) are written.
  std::string dump_path = "./dump_path";
  /// The ranks that dump (`RANK` of torchrun); empty: all.
  std::vector<int64_t> rank;
  /// The steps that dump, counted by `step()` from 0; empty: all.
  std::vector<int64_t> step;
  /// "L0": modules. msprobe's default "L1" (APIs) is not dumped by modhooks.
  std::string level = "L1";
  /// Whether construct.json and stack.json are written.
  bool extra_info = true;
  /// Accepted for msprobe's config files; either way modhooks writes dump.json at `stop()` and
  /// `step()`, and task "tensor"'s files on a thread of its own (`max_pending_bytes`).
  bool async_dump = false;
  /// Two full entry names, the first and last module dumped (`Module.fc1.Linear.forward.0`); or
  /// empty: every module.
  std::vector<std::string> scope;
  /// Substrings of the entry names to dump; empty: all.
  std::vector<std::string> list;
  /// "all", or some of "forward", "backward", "input", "output".
  std::vector<std::string> data_mode = {"all"};
  /// Task "statistics" only: "statistics" (Max, Min, Mean, Norm) or "md5" (adds a CRC-32).
  std::string summary_mode = "statistics";
  /// modhooks' own, not a key of msprobe's config.json: task "tensor" writes its files on a
  /// thread of its own, and the copies of tensors waiting for it hold at most this many bytes
  /// (a hook that would pass it waits; a tensor larger than it waits until nothing else does).
  std::size_t max_pending_bytes = std::size_t{512} << 20;

  /// Reads msprobe's config.json. A key msprobe does not know, a value of the wrong type, or a
  /// key whose feature modhooks lacks raises modhooks::Error naming the key ("tensor.scope");
  /// then `validate()` runs.
  ///
  /// **Example**:
  /// \code
  ///   auto config = modhooks::probe::Config::from_file("config.json");
  /// \endcode
  static Config from_file(const std::string& path);
  /// The same from the file's text.
  ///
  /// **Example**:
  /// \code
  ///   auto config = modhooks::probe::Config::from_json(
  ///       R"({"task": "tensor", "level": "L0", "dump_path": "dump"})");
  /// \endcode
  static Config from_json(const std::string& text);

  /// Raises modhooks::ValueError naming the member whose value msprobe (or modhooks) does not
  /// take: an unknown task, level, data_mode or summary_mode, a scope that is not two module
  /// entry names. `PrecisionDebugger`'s constructor calls it.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::probe::Config config;
  ///   config.level = "L0";
  ///   config.validate();
  /// \endcode
  void validate() const;
};

/// @}

}  // namespace probe
MODHOOKS_END_NAMESPACE
