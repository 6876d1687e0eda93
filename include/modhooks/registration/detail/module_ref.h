// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include "modhooks/aoti/detail/identity.h"
#include "modhooks/core/detail/adapt.h"
#include "modhooks/core/detail/kinds.h"
#include "modhooks/executorch/detail/identity.h"
#include "modhooks/jit/detail/identity.h"
#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Every kind of module, in the order a global hook written for several is added to their tables.
/// A new kind is its adapter's folder, its identity header included above, and its entry here.
using Kinds =
    KindList<torch::nn::Module, torch::jit::Module, const aoti::Point, const executorch::Point>;

/// The module behind every spelling the public functions accept, nn (`Module&`,
/// `shared_ptr<T>`, holders), TorchScript (`torch::jit::Module`) or a hook point of an exported
/// model (`aoti::Point`, `executorch::Point`): the one place that sees every adapter's `module_ref`
/// overloads.
template <class M>
using ModuleType = std::remove_reference_t<decltype(module_ref(std::declval<M&>()))>;

/// Enables an overload for every module spelling, nn, TorchScript or point.
template <class M>
using IfModule = std::enable_if_t<sizeof(ModuleType<M>*) != 0, int>;

/// Enables an overload for the spellings of modules that have state (nn and TorchScript): a
/// point of an exported model has none, and state functions do not take it.
template <class M>
using IfStateModule = std::enable_if_t<KindTraits<BaseOf<ModuleType<M>>>::state, int>;

}  // namespace detail
MODHOOKS_END_NAMESPACE
