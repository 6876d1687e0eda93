// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "dtypes.h"

#include <torch/csrc/api/include/torch/version.h>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

using c10::ScalarType;

/// Newer dtypes exist only in newer libtorch; the table lists what the linked one has.
constexpr DtypeNames kDtypes[] = {
    {ScalarType::Float, "float32", "FloatStorage", "F32"},
    {ScalarType::Double, "float64", "DoubleStorage", "F64"},
    {ScalarType::Half, "float16", "HalfStorage", "F16"},
    {ScalarType::BFloat16, "bfloat16", "BFloat16Storage", "BF16"},
    {ScalarType::Char, "int8", "CharStorage", "I8"},
    {ScalarType::Short, "int16", "ShortStorage", "I16"},
    {ScalarType::Int, "int32", "IntStorage", "I32"},
    {ScalarType::Long, "int64", "LongStorage", "I64"},
    {ScalarType::Byte, "uint8", "ByteStorage", "U8"},
    {ScalarType::Bool, "bool", "BoolStorage", "BOOL"},
    {ScalarType::ComplexFloat, "complex64", "ComplexFloatStorage", "C64"},
    {ScalarType::ComplexDouble, "complex128", "ComplexDoubleStorage", ""},
    {ScalarType::ComplexHalf, "complex32", "", ""},
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    {ScalarType::UInt16, "uint16", "", "U16"},
    {ScalarType::UInt32, "uint32", "", "U32"},
    {ScalarType::UInt64, "uint64", "", "U64"},
    {ScalarType::Float8_e4m3fn, "float8_e4m3fn", "", "F8_E4M3"},
    {ScalarType::Float8_e5m2, "float8_e5m2", "", "F8_E5M2"},
    {ScalarType::Float8_e4m3fnuz, "float8_e4m3fnuz", "", "F8_E4M3FNUZ"},
    {ScalarType::Float8_e5m2fnuz, "float8_e5m2fnuz", "", "F8_E5M2FNUZ"},
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
    {ScalarType::Float8_e8m0fnu, "float8_e8m0fnu", "", "F8_E8M0"},
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
    {ScalarType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", "", ""},
#endif
};

/// Every dtype name the table holds with the newest libtorch, so that a file naming one the
/// linked libtorch lacks gets an error that says so.
constexpr std::string_view kNewerDtypeNames[] = {
    "uint16",          "uint32",          "uint64",         "float8_e4m3fn",   "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"};

template <class Match>
const DtypeNames* find_if(Match match) {
  for (const auto& entry : kDtypes) {
    if (match(entry)) return &entry;
  }
  return nullptr;
}

}  // namespace

const DtypeNames* find_dtype(c10::ScalarType type) {
  return find_if([&](const DtypeNames& e) { return e.type == type; });
}

const DtypeNames* find_dtype_by_torch_name(std::string_view name) {
  return find_if([&](const DtypeNames& e) { return e.torch_name == name; });
}

bool is_newer_dtype_name(std::string_view name) {
  for (std::string_view newer : kNewerDtypeNames) {
    if (newer == name) return true;
  }
  return false;
}

const DtypeNames* find_dtype_by_storage_class(std::string_view name) {
  if (name.empty()) return nullptr;
  return find_if([&](const DtypeNames& e) { return e.storage_class == name; });
}

const DtypeNames* find_dtype_by_safetensors_name(std::string_view name) {
  if (name.empty()) return nullptr;
  return find_if([&](const DtypeNames& e) { return e.safetensors_name == name; });
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
