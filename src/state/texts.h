// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "modhooks/state/detail/texts.h"
#include "modhooks/version.h"

// Python's texts in state-dict errors: keys, shapes and messages as `torch.nn.Module` prints them.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

inline std::string without_dot(const std::string& prefix) {
  return prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);
}

/// `"a", "b"` (or `"a" and "b"` with that separator), as Python's load errors list keys.
inline std::string quoted_list(const std::vector<std::string>& keys,
                               const std::string& separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i) out += separator;
    out.append("\"").append(keys[i]).append("\"");
  }
  return out;
}

/// An exception's message as Python shows it: c10's without the C++ backtrace.
inline std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
