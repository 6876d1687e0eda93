// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include "modhooks/jit/detail/identity.h"
#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The module behind every spelling the public functions accept, nn (`Module&`,
/// `shared_ptr<T>`, holders) or TorchScript (`torch::jit::Module`): the one place that sees
/// both adapters' `module_ref` overloads.
template <class M>
using ModuleType = std::remove_reference_t<decltype(module_ref(std::declval<M&>()))>;

/// Enables an overload for every module spelling, nn or TorchScript.
template <class M>
using IfModule = std::enable_if_t<sizeof(ModuleType<M>*) != 0, int>;

}  // namespace detail
MODHOOKS_END_NAMESPACE
