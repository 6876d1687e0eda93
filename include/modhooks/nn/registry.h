// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <type_traits>

#include "modhooks/nn/hook_types.h"

namespace modhooks {
namespace detail {

using NnHooks = ModuleHooks<torch::nn::Module>;

/// The hook tables of `module`, or null when it has none. A module is identified by its address
/// and, when a shared_ptr owns it (as every ModuleHolder does), by that ownership, so tables
/// never pass to a new module built where a dead one was.
std::shared_ptr<NnHooks> find_hooks(const torch::nn::Module& module);

/// The hook tables of `module`, created on first use.
std::shared_ptr<NnHooks> hooks_for(torch::nn::Module& module);

/// The tables of `register_module_*` hooks, which run for every nn module before its own.
const std::shared_ptr<NnHooks>& global_hooks();

/// The concrete module behind each accepted spelling: `Module&`, `shared_ptr<T>`,
/// `ModuleHolder<T>` (e.g. `torch::nn::Linear`).
template <class T, std::enable_if_t<std::is_base_of_v<torch::nn::Module, T>, int> = 0>
T& module_ref(T& module) noexcept {
  return module;
}
template <class T>
T& module_ref(const std::shared_ptr<T>& module) noexcept {
  return *module;
}
template <class T>
T& module_ref(const torch::nn::ModuleHolder<T>& module) noexcept {
  return *module.ptr();
}

template <class M>
using ModuleType = std::remove_reference_t<decltype(module_ref(std::declval<M&>()))>;

/// Enables an overload for the nn module spellings only.
template <class M>
using IfModule = std::enable_if_t<std::is_base_of_v<torch::nn::Module, ModuleType<M>>, int>;

}  // namespace detail
}  // namespace modhooks
