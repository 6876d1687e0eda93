// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// The one place the version is written; CMake reads it from here.
///
/// **Example**:
/// \code
///   #if MODHOOKS_VERSION >= 100  // 0.1.0 or newer
///   std::cout << MODHOOKS_VERSION_MAJOR << "." << MODHOOKS_VERSION_MINOR << "."
///             << MODHOOKS_VERSION_PATCH << "\n";
///   #endif
/// \endcode

/// \addtogroup api_core
/// @{

/// The major version; modhooks' CMake package accepts a request for any version with the same
/// one (`SameMajorVersion`).
#define MODHOOKS_VERSION_MAJOR 0
/// The minor version.
#define MODHOOKS_VERSION_MINOR 1
/// The patch version.
#define MODHOOKS_VERSION_PATCH 0
/// The version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `#if`.
#define MODHOOKS_VERSION \
  (MODHOOKS_VERSION_MAJOR * 10000 + MODHOOKS_VERSION_MINOR * 100 + MODHOOKS_VERSION_PATCH)

/// @}
