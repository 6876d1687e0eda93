// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/version.h"

/// The kinds of module the dispatch layer serves, declared only: it names them in its templates
/// and global tables without depending on any adapter. A kind is the type its hooks receive:
/// `torch::nn::Module`, `torch::jit::Module`, or `const aoti::Point` for a hook point of an
/// exported model.
namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

MODHOOKS_BEGIN_NAMESPACE
namespace aoti {
class Point;
}  // namespace aoti

namespace detail {

template <class... K>
struct KindList {};

/// Every kind, in the order a global hook written for several is added to their tables.
using Kinds = KindList<torch::nn::Module, torch::jit::Module, const aoti::Point>;

/// What a kind has beyond forward hooks. `generic_hooks`: a global hook that takes `auto&`
/// reaches it; a kind without (points) takes only hooks written for it, so that an `auto&` hook
/// written for modules is never instantiated for it.
template <class M>
struct KindTraits {
  static constexpr bool backward = true;
  static constexpr bool state = true;
  static constexpr bool generic_hooks = true;
};

/// AOTInductor packages run forward only: no autograd graph, no module state of their own.
template <>
struct KindTraits<const aoti::Point> {
  static constexpr bool backward = false;
  static constexpr bool state = false;
  static constexpr bool generic_hooks = false;
};

/// Calls `fn(static_cast<K*>(nullptr))` for every kind `K`.
template <class... K, class F>
void for_each_kind(KindList<K...> /*kinds*/, F&& fn) {
  (fn(static_cast<K*>(nullptr)), ...);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
