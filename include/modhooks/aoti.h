// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// The optional component `modhooks::aoti` (`find_package(modhooks CONFIG REQUIRED COMPONENTS
/// aoti)`): hooks inside AOTInductor packages exported with `modhooks.export` (docs/export.md).
/// Hooks register on a `Point` with the same `register_*` functions as on modules.

#include "modhooks/aoti/model.h"
#include "modhooks/aoti/point.h"
#include "modhooks/modhooks.h"
