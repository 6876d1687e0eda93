// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

/// msprobe's JSON values keep their keys in insertion order, as Python's dicts do.
using Json = nlohmann::ordered_json;

/// The text Python's `json.dump(value, f, indent=1)` writes: keys in order, ", " and ": " as
/// separators, non-ASCII escaped, and NaN and infinities as the bare tokens `NaN`, `Infinity`,
/// `-Infinity` (nlohmann's own dump writes `null`, which compare reads as "None" and passes).
std::string python_json(const Json& value);

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
