// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/nn/backward_hook.h"
#include "modhooks/nn/boxing.h"
#include "modhooks/nn/registry.h"

namespace modhooks {
namespace detail {

/// Python's exception path of `_call_impl`: always-call forward hooks that have not run yet run
/// now, global ones first; an exception they raise becomes a warning, so the original error is
/// the one that propagates.
template <class Snapshot>
void run_always_called(torch::nn::Module& module, const Snapshot& hooks, const char* kind,
                       const std::vector<std::uint64_t>& called,
                       const std::vector<c10::IValue>& args, c10::IValue& result) {
  for (const auto& entry : *hooks) {
    if (!entry.hook.always_call ||
        std::find(called.begin(), called.end(), entry.id) != called.end()) {
      continue;
    }
    try {
      if (auto replaced = entry.hook.fn(module, args, result)) result = std::move(*replaced);
    } catch (const std::exception& e) {
      TORCH_WARN(kind,
                 "forward hook with ``always_call=True`` raised an exception that was silenced "
                 "as another error was raised in forward: ",
                 e.what());
    }
  }
}

/// `call` when some hook exists somewhere: Python's `_call_impl` for a typed `forward`.
template <class T, class... Args>
C10_NOINLINE auto call_with_hooks(T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  using R = decltype(module.forward(std::forward<Args>(args)...));
  const NnHooks& global = *global_hooks();
  const std::shared_ptr<NnHooks> local = find_hooks(module);
  const auto global_pre = global.forward_pre.snapshot();
  const auto global_fwd = global.forward.snapshot();
  const auto local_pre = local ? local->forward_pre.snapshot() : nullptr;
  const auto local_fwd = local ? local->forward.snapshot() : nullptr;
  const bool any_pre = !global_pre->empty() || (local_pre && !local_pre->empty());
  const bool any_fwd = !global_fwd->empty() || (local_fwd && !local_fwd->empty());
  const bool any_bwd = wants_backward_hook(global, local.get());
  if (!any_pre && !any_fwd && !any_bwd) return module.forward(std::forward<Args>(args)...);

  torch::nn::Module& base = module;
  c10::intrusive_ptr<BackwardHookBase> backward_hook;
  if (any_bwd) {
    backward_hook = c10::make_intrusive<BackwardHook<torch::nn::Module>>(
        base, base.weak_from_this().lock(), global, local.get());
  }
  std::tuple<std::decay_t<Args>...> values(std::forward<Args>(args)...);
  std::vector<c10::IValue> boxed;  // what the hooks see as `args`
  std::optional<R> result;
  std::vector<std::uint64_t> always_called;
  c10::IValue output;
  try {
    if (any_pre) {
      boxed = box_all(values);
      for (const auto* list : {&global_pre, &local_pre}) {
        if (!*list) continue;
        for (const auto& entry : **list) {
          if (auto replaced = entry.hook(base, boxed)) boxed = std::move(*replaced);
        }
      }
      unbox_all(boxed, values);
    }
    if (backward_hook) wrap_tuple(*backward_hook, values, /*output_side=*/false);
    result.emplace(std::apply([&](auto&... a) -> R { return module.forward(a...); }, values));
    if (any_fwd) {
      boxed = box_all(values);  // hooks see the args forward received, views included
      output = box(*result);
      bool replaced_any = false;
      for (const auto* list : {&global_fwd, &local_fwd}) {
        if (!*list) continue;
        for (const auto& entry : **list) {
          // Marked before the call: a hook that raises is not run again by the error path.
          if (entry.hook.always_call) always_called.push_back(entry.id);
          if (auto replaced = entry.hook.fn(base, boxed, output)) {
            output = std::move(*replaced);
            replaced_any = true;
          }
        }
      }
      if (replaced_any) unbox_into(output, *result);
    }
    if (backward_hook) wrap_output(*backward_hook, *result);
  } catch (...) {
    if (boxed.empty()) boxed = box_all(values);
    run_always_called(base, global_fwd, "global module ", always_called, boxed, output);
    if (local_fwd) run_always_called(base, local_fwd, "module ", always_called, boxed, output);
    throw;
  }
  return std::move(*result);
}

}  // namespace detail

/// Runs `module` through its hooks: forward pre-hooks (global, then the module's), `forward`,
/// forward hooks, and the full-backward wiring; returns what `forward` returns.
///
/// libtorch calls `forward` directly (`ModuleHolder::operator()`, `torch::nn::Sequential`), so
/// hooks fire only through `call` (and `modhooks::Sequential`). While no hook is registered
/// anywhere, `call` costs one relaxed atomic load over a direct `forward`.
///
/// **Example**:
/// \code
///   torch::nn::Linear linear(4, 2);
///   auto handle = modhooks::register_forward_hook(linear, [](auto&, auto&, auto& out) {
///     std::cout << out.toTensor().mean() << "\n";
///   });
///   at::Tensor y = modhooks::call(linear, torch::randn({3, 4}));
/// \endcode
template <class M, class... Args, detail::IfModule<M> = 0>
auto call(M&& module, Args&&... args)
    -> decltype(detail::module_ref(module).forward(std::forward<Args>(args)...)) {
  auto& impl = detail::module_ref(module);
  if (C10_LIKELY(detail::call_hooks_active.load(std::memory_order_relaxed) == 0)) {
    return impl.forward(std::forward<Args>(args)...);
  }
  return detail::call_with_hooks(impl, std::forward<Args>(args)...);
}

}  // namespace modhooks
