// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <atomic>
#include <vector>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/detail/inline.h"
#include "modhooks/jit/detail/registry.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
c10::IValue call_script_with_hooks(torch::jit::Module& module, std::vector<c10::IValue> inputs);
}  // namespace detail

/// \addtogroup api_jit
/// @{

/// Runs a TorchScript module (`torch::jit::load`ed, or built in C++) through its hooks: forward
/// pre-hooks, `forward`, forward hooks, and full backward (pre-)hooks wired around its tensor
/// inputs and outputs, with the same semantics as for nn modules; returns what `forward` returns.
/// Hooks on submodules fire inside, where the model's code calls them (see `instrument`), also
/// when the model runs through `forward` directly. Global hooks whose callable takes a
/// `torch::jit::Module&` (or `auto&`) apply here too. A `modhooks::Error` raised inside the
/// model (a bad replacement) is rethrown as itself, although libtorch's interpreter had turned
/// it into an error of its own.
///
/// **Example**:
/// \code
///   torch::jit::Module model = torch::jit::load("model.pt");
///   auto h = modhooks::register_full_backward_hook(model, modhooks::grad::clip_norm(1.0));
///   c10::IValue out = modhooks::call(model, {x});
/// \endcode
inline c10::IValue call(const torch::jit::Module& module, std::vector<c10::IValue> inputs) {
  auto& m = const_cast<torch::jit::Module&>(module);  // a handle to the module's object
  if (MODHOOKS_LIKELY(detail::call_hooks_active.load(std::memory_order_relaxed) == 0)) {
    return m.forward(std::move(inputs));
  }
  return detail::call_script_with_hooks(m, std::move(inputs));
}

/// @}

MODHOOKS_END_NAMESPACE
