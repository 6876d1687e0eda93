// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <stdexcept>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_core
/// @{

/// The one exception type modhooks raises. Its text is PyTorch's wherever PyTorch has one, so
/// code ported from Python can match on the same messages.
///
/// **Example**:
/// \code
///   try {
///     modhooks::submodule(net, "blokc");
///   } catch (const modhooks::Error& e) {
///     std::cerr << e.what() << "\n";  // "Net has no attribute `blokc`"
///   }
/// \endcode
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @}

namespace detail {

/// Single throw point: keeps message building off the hot paths that call it.
[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace detail
MODHOOKS_END_NAMESPACE
