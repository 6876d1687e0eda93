// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Calls `step(item, first)` on each dot-separated item of `path` in turn ("layer1.0" gives
/// "layer1", then "0"), `first` true for the first, as Python's `get_submodule` walks a path. An
/// empty path has no items; an empty item ("a..b") is passed on, for the caller to refuse.
template <class Step>
void for_each_path_item(const std::string& path, Step&& step) {
  std::size_t begin = 0;
  while (!path.empty() && begin <= path.size()) {
    std::size_t end = path.find('.', begin);
    if (end == std::string::npos) end = path.size();
    step(path.substr(begin, end - begin), begin == 0);
    begin = end + 1;
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
