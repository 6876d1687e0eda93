// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The unpickler's values as error texts name them: their kinds and dict keys.
#include "pickle_value.h"

#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {

const char* tag_name(Tag tag) {
  switch (tag) {
    case Tag::kUnset:
    case Tag::kNone:
      return "None";
    case Tag::kBool:
      return "bool";
    case Tag::kInt:
      return "int";
    case Tag::kFloat:
      return "float";
    case Tag::kStr:
      return "str";
    case Tag::kTuple:
      return "tuple";
    case Tag::kList:
      return "list";
    case Tag::kDict:
      return "dict";
    case Tag::kComplex:
      return "complex";
    case Tag::kDevice:
      return "device";
    case Tag::kGlobal:
      return "global";
    case Tag::kStorage:
      return "storage";
    case Tag::kTensor:
      return "tensor";
  }
  return "?";
}

std::string key_text(const Value& key) {
  switch (key.tag) {
    case Tag::kStr:
      return key.str();
    case Tag::kInt:
    case Tag::kBool:
      return std::to_string(key.number);
    case Tag::kFloat:
      return std::to_string(key.real);
    default:
      return std::string("a ") + tag_name(key.tag);
  }
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
