// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/core/error.h"

#include <string>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

template <class E>
void fail(const char* id, const std::string& message) {
  throw E(id, message);
}

template void fail<KeyError>(const char*, const std::string&);
template void fail<ValueError>(const char*, const std::string&);
template void fail<TypeError>(const char*, const std::string&);
template void fail<AttributeError>(const char*, const std::string&);
template void fail<IndexError>(const char*, const std::string&);
template void fail<RuntimeError>(const char*, const std::string&);
template void fail<FormatError>(const char*, const std::string&);

}  // namespace detail
MODHOOKS_END_NAMESPACE
