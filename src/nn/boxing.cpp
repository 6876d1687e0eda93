// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/detail/boxing.h"

#include <cstddef>
#include <vector>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

void ShownArgsBuffer::resize(std::vector<c10::IValue>& args, std::size_t n) { args.resize(n); }

std::vector<c10::IValue>* ShownArgsBuffer::take_nested(std::size_t n) {
  return new std::vector<c10::IValue>(n);
}

void ShownArgsBuffer::give_back_nested(std::vector<c10::IValue>* args) noexcept { delete args; }

}  // namespace detail
MODHOOKS_END_NAMESPACE
