// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>
#include <vector>

#include "modhooks/version.h"

// The point table and the ABI that `modhooks.export` writes into a compiled program (an
// AOTInductor package's metadata, an ExecuTorch program's constant methods).

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// One row of the point table (python/modhooks/export.py, `point_table`).
struct PointEntry {
  std::string name;
  std::string type_name;
  bool inputs = false;
  bool single = true;
};

/// The rows of the point table `json` of the program at `path`; FormatError `bad_id` where it
/// cannot be read.
std::vector<PointEntry> parse_point_table(const std::string& json, const std::string& path,
                                          const char* bad_id);

/// RuntimeError `mismatch_id` where `abi`, the modhooks ABI the program at `path` was exported
/// for, is not this library's (major.minor while the major version is 0, as the ABI namespace
/// and the soname are).
void check_point_abi(const std::string& abi, const std::string& path, const char* mismatch_id);

/// KeyError `id` for a point `name` that the program at `path` lacks, listing `names`, its
/// points, or saying it has none (exported without points: `how` names how to export with them).
[[noreturn]] void fail_no_point(const std::string& path, const std::string& name,
                                const std::vector<std::string>& names, const char* id,
                                const char* how);

}  // namespace detail
MODHOOKS_END_NAMESPACE
