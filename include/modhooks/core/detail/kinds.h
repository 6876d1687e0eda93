// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "modhooks/version.h"

/// A kind of module is the type its hooks receive (`torch::nn::Module`, `torch::jit::Module`,
/// `const aoti::Point`). Each adapter declares its own in its identity header (its `module_ref`,
/// and where it differs from the defaults, its `KindTraits` and `BaseOfT`);
/// `registration/detail/module_ref.h` lists them for the registration functions. Nothing below the
/// adapters names one.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

template <class... K>
struct KindList {};

/// What a kind has beyond forward hooks. `backward`: an autograd graph, so backward hooks apply;
/// `state`: parameters and buffers, so state functions apply; `generic_hooks`: a global hook that
/// takes `auto&` reaches it; a kind without takes only hooks written for it, so that an `auto&`
/// hook written for modules is never instantiated for it.
template <class M>
struct KindTraits {
  static constexpr bool backward = true;
  static constexpr bool state = true;
  static constexpr bool generic_hooks = true;
};

/// Calls `fn(static_cast<K*>(nullptr))` for every kind `K`.
template <class... K, class F>
void for_each_kind(KindList<K...> /*kinds*/, F&& fn) {
  (fn(static_cast<K*>(nullptr)), ...);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
