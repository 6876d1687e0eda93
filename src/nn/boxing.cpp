// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/detail/boxing.h"

#include <cstddef>
#include <vector>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

void resize_shown_args(std::vector<c10::IValue>& args, std::size_t n) { args.resize(n); }

}  // namespace detail
MODHOOKS_END_NAMESPACE
