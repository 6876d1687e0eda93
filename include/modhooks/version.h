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

/// `v<major>_<minor>`, the ABI namespace's name.
#define MODHOOKS_ABI_NAME(major, minor) MODHOOKS_ABI_NAME_(major, minor)
/// \cond
#define MODHOOKS_ABI_NAME_(major, minor) v##major##_##minor
/// \endcond

/// What the library exports: everything declared in modhooks' namespace. The library is built
/// with hidden visibility (CMake's CXX_VISIBILITY_PRESET), so the libtorch and standard-library
/// code it instantiates stays inside it, except members of classes libtorch itself marks
/// visible; the namespace below opts back in, which keeps one
/// definition of each modhooks function, type and process-wide table for every shared object of
/// a process.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_API __attribute__((visibility("default")))
#else
#define MODHOOKS_API
#endif

/// The ABI namespace, as fmt's `inline namespace v11`: every name is `modhooks::v0_1::...` in
/// the binary and `modhooks::...` in source. It is made from the version, as the SOVERSION is
/// (major.minor while the major version is 0), so a program built against one ABI cannot link
/// against another. Every file of modhooks opens its namespace with these two macros.
#define MODHOOKS_BEGIN_NAMESPACE \
  namespace modhooks {           \
  inline namespace MODHOOKS_ABI_NAME(MODHOOKS_VERSION_MAJOR, MODHOOKS_VERSION_MINOR) MODHOOKS_API {
/// Closes what `MODHOOKS_BEGIN_NAMESPACE` opened.
#define MODHOOKS_END_NAMESPACE \
  }                            \
  }

/// @}
