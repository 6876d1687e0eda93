// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// The optional component `modhooks::executorch` (`find_package(modhooks CONFIG REQUIRED
/// COMPONENTS executorch)`): hooks inside ExecuTorch programs exported with `modhooks.export`
/// (docs/executorch.md). Hooks register on a `Point` with the same `register_*` functions as on
/// modules.

#include "modhooks/executorch/point.h"
#include "modhooks/executorch/program.h"
#include "modhooks/modhooks.h"
