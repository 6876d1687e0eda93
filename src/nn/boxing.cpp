// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/detail/boxing.h"

#include <cstddef>
#include <memory>
#include <vector>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

std::vector<c10::IValue>& ShownArgsBuffer::far_level() {
  while (far.size() <= depth - kNear) far.push_back(std::make_unique<std::vector<c10::IValue>>());
  return *far[depth - kNear];
}

void ShownArgsBuffer::resize(std::vector<c10::IValue>& args, std::size_t n) { args.resize(n); }

}  // namespace detail
MODHOOKS_END_NAMESPACE
