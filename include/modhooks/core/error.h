// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_core
/// @{

/// What every error modhooks raises derives from. Its text is PyTorch's wherever PyTorch has
/// one, so code ported from Python can match on the same messages; its type says which
/// exception Python raises in the same situation (`KeyError`, `ValueError`, ...), and `id()`
/// names the failure with a dotted string that stays the same across versions (docs/errors.md
/// lists them), so code can tell failures apart without reading texts.
///
/// **Example**:
/// \code
///   try {
///     modhooks::submodule(net, "blokc");
///   } catch (const modhooks::AttributeError& e) {
///     std::cerr << e.id() << ": " << e.what() << "\n";
///     // "nn.submodule.no_attribute: Net has no attribute `blokc`"
///   }
/// \endcode
class Error : public std::runtime_error {
 public:
  /// `id` must outlive the error: modhooks passes string literals.
  Error(const char* id, const std::string& message) : std::runtime_error(message), id_(id) {}

  /// The stable name of this failure, e.g. "state.load.missing_keys".
  const char* id() const noexcept { return id_; }

  /// An error of this one's type and id with `message` instead of its own: how modhooks adds
  /// context (the file's path, the shard) to an error on its way out
  /// (`std::rethrow_exception(e.with_message(...))`).
  virtual std::exception_ptr with_message(const std::string& message) const {
    return std::make_exception_ptr(Error(id_, message));
  }

 private:
  const char* id_;
};

namespace detail {

/// One category of `Error`: `with_message` keeps it.
template <class Self>
class ErrorCategory : public Error {
 public:
  using Error::Error;
  std::exception_ptr with_message(const std::string& message) const override {
    return std::make_exception_ptr(Self(id(), message));
  }
};

}  // namespace detail

/// Where Python raises `KeyError`: a key that is not there.
class KeyError : public detail::ErrorCategory<KeyError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// Where Python raises `ValueError`: an argument of the right type with a wrong value.
class ValueError : public detail::ErrorCategory<ValueError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// Where Python raises `TypeError`: a value of the wrong type.
class TypeError : public detail::ErrorCategory<TypeError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// Where Python raises `AttributeError`: a module without the named attribute.
class AttributeError : public detail::ErrorCategory<AttributeError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// Where Python raises `IndexError`: an index out of range.
class IndexError : public detail::ErrorCategory<IndexError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// Where Python raises `RuntimeError`, and whatever has no closer match (a failing device, a
/// file that cannot be opened, a dead rank).
class RuntimeError : public detail::ErrorCategory<RuntimeError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// A file (or bytes) that cannot be read as what it claims to be: where Python raises
/// `UnpicklingError`, `SafetensorError`, or `RuntimeError` from `torch.load`.
class FormatError : public detail::ErrorCategory<FormatError> {
 public:
  using ErrorCategory::ErrorCategory;
};

/// @}

namespace detail {

/// Single throw point, defined in the library for each category (src/core/error.cpp): the
/// throw stays out of the inline hot paths that check for errors (a hooked `call`), only the
/// call remains there. `E` is the category, `id` the stable name (docs/errors.md).
template <class E>
[[noreturn]] void fail(const char* id, const std::string& message);

extern template void fail<KeyError>(const char*, const std::string&);
extern template void fail<ValueError>(const char*, const std::string&);
extern template void fail<TypeError>(const char*, const std::string&);
extern template void fail<AttributeError>(const char*, const std::string&);
extern template void fail<IndexError>(const char*, const std::string&);
extern template void fail<RuntimeError>(const char*, const std::string&);
extern template void fail<FormatError>(const char*, const std::string&);

}  // namespace detail
MODHOOKS_END_NAMESPACE
