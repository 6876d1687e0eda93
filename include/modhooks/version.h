// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The one place the version is written; CMake reads it from here.
#define MODHOOKS_VERSION_MAJOR 0
#define MODHOOKS_VERSION_MINOR 1
#define MODHOOKS_VERSION_PATCH 0
#define MODHOOKS_VERSION \
  (MODHOOKS_VERSION_MAJOR * 10000 + MODHOOKS_VERSION_MINOR * 100 + MODHOOKS_VERSION_PATCH)
