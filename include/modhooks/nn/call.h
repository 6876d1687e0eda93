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
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/backward_hook.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/nn/detail/boxing.h"
#include "modhooks/nn/detail/registry.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Runs `unbox`, which converts a hook's replacement back into forward's types; a value they
/// cannot hold becomes a `modhooks::Error` naming the hook kind and the module (c10's "Expected
/// Tensor but got Int" names neither).
template <class F>
void unbox_replacement(const char* hook, const torch::nn::Module& module, F&& unbox) {
  try {
    unbox();
  } catch (const c10::Error& e) {
    fail<TypeError>(
        "nn.hook.bad_replacement",
        std::string("modhooks: a ") + hook + " of module " + python_class_name(module) +
            " returned a value that forward's types cannot hold: " + e.what_without_backtrace());
  }
}

/// Python's `_call_impl` around `module.forward`, on the arguments in `values`: pre-hooks, the
/// backward wiring, forward, forward hooks; always-call hooks when any of them throws. With
/// `kOwned` false, `values` refers to the caller's arguments, and the dispatch has neither
/// pre-hooks nor backward hooks (which would edit them).
template <class R, bool kOwned, class T, class Values>
R run_hooked(T& module, Dispatch<torch::nn::Module>& dispatch,
             const c10::intrusive_ptr<BackwardHookBase>& backward_hook, Values& values) {
  torch::nn::Module& base = module;
  std::vector<c10::IValue> pre_args;  // what pre-hooks see and replace, while they run
  std::optional<R> result;
  std::optional<ShownValue> output;  // what forward hooks see, while they run
  try {
    if constexpr (kOwned) {
      if (dispatch.has_pre_hooks()) {
        pre_args = box_all(values);
        if (dispatch.run_pre_hooks(base, pre_args)) {
          unbox_replacement("forward pre-hook", base, [&] { unbox_all(pre_args, values); });
        }
        pre_args.clear();
      }
      if (backward_hook) wrap_tuple(*backward_hook, values, /*output_side=*/false);
    }
    result.emplace(std::apply([&](auto&... a) -> R { return module.forward(a...); }, values));
    if (dispatch.has_forward_hooks()) {
      const ShownArgs args(values);  // hooks see the args forward received, views included
      output.emplace(show(*result));
      if (dispatch.run_forward_hooks(base, args.get(), *output)) {
        unbox_replacement("forward hook", base, [&] { unbox_into(output->get(), *result); });
      }
      output.reset();
    }
    if (backward_hook) wrap_output(*backward_hook, *result);
  } catch (...) {
    if (!output) output.emplace();
    if (!pre_args.empty()) {
      dispatch.run_always_called(base, pre_args, *output);
    } else {
      const ShownArgs args(values);
      dispatch.run_always_called(base, args.get(), *output);
    }
    throw;
  }
  return std::move(*result);
}

/// What `own_forward_hooks_only` found: whether the module's own forward hooks are all that a
/// call of it runs, and those hooks (null where the module has none at all).
struct OwnForwardHooks {
  bool only;
  HookList<ForwardHookEntry<torch::nn::Module>>::Snapshot forward;
};

/// Whether the module's own forward hooks are all that a call of it without global hooks runs
/// (no other kind of hook, none `always_call`), found in one visit of its tables, with those
/// hooks. The call's `Dispatch` is not built here: a `std::optional` of it, even unset, was
/// zero-filled on every call (160 bytes, two `rep stos`: three quarters of `call_with_hooks`'
/// own samples in a perf profile of two no-op hooks on Identity), so the general path builds its
/// own (`call_dispatched`). This path and its helpers are inlined into one function: after a
/// forward whose code evicts theirs from the instruction cache (Linear), each extra function is
/// extra cache lines to fetch again. The snapshot is taken last, straight into the result, so
/// that its reference count moves once.
MODHOOKS_ALWAYS_INLINE inline OwnForwardHooks own_forward_hooks_only(
    const torch::nn::Module& module) {
  return nn_table<NnHooks>().visit(
      &module, [&](const std::shared_ptr<NnHooks>* found) MODHOOKS_ALWAYS_INLINE {
        // None at all: the filter's slot is shared with a hooked module.
        if (!found) return OwnForwardHooks{true, nullptr};
        const NnHooks& hooks = **found;
        if (!hooks.forward_hooks_only()) return OwnForwardHooks{false, nullptr};
        return OwnForwardHooks{true, hooks.forward.snapshot_guarded()};
      });
}

/// A forward hook's replacement, taken out of the hooked call's way (hooks that replace are rare).
MODHOOKS_COLD inline void take_replacement(ShownValue& output, std::optional<c10::IValue>& value) {
  output.replace(std::move(*value));
  value.reset();
}
template <class R>
MODHOOKS_COLD void unbox_forward_replacement(const torch::nn::Module& module,
                                             const c10::IValue& output, R& result) {
  unbox_replacement("forward hook", module, [&] { unbox_into(output, result); });
}

/// Python's `_call_impl` when the module's own forward hooks are all it runs: forward, then the
/// hooks on what forward received (the caller's arguments, not copies) and its result, each
/// borrowed. No error path: without always-call hooks, what forward or a hook throws propagates
/// as it is. Forward evicts this path's code and data from the first-level caches on a real
/// layer, so what it costs is mostly the cache lines it spans: two no-op hooks on Conv2d take 196
/// instructions, 18 instruction-cache and 12.5 data-cache misses a call beside forward
/// (callgrind's cache simulation on call_bench, the hooks and libtorch's reference counts
/// included). They took 359 and 38 instruction-cache misses while the rare cases (a
/// replacement, a nested call, a dead module's entry) were inline, the snapshot's count and the
/// shown values' destructors were out-of-line calls, and the arguments were pushed onto a vector
/// emptied after each call; and 16.5 data-cache misses while the kinds of hooks were read from
/// each list's own line (see `ModuleHooks::kinds`).
template <class R, class T, class... Args>
MODHOOKS_ALWAYS_INLINE inline R run_forward_hooks_only(
    T& module, const std::vector<HookList<ForwardHookEntry<torch::nn::Module>>::Entry>& hooks,
    Args&... args) {
  torch::nn::Module& base = module;
  R result = module.forward(args...);
  {
    const ShownArgs shown(std::tuple<Args&...>(args...));
    ShownValue output = show(result);
    bool replaced = false;
    for (const auto& entry : hooks) {
      std::optional<c10::IValue> replacement = entry.hook.fn(base, shown.get(), output.get());
      if (C10_UNLIKELY(replacement.has_value())) {
        take_replacement(output, replacement);
        replaced = true;
      }
    }
    if (C10_UNLIKELY(replaced)) unbox_forward_replacement(base, output.get(), result);
  }
  return result;
}

/// `call` through the call's `Dispatch`: global hooks, pre-hooks, backward hooks, always-call
/// forward hooks.
template <class T, class... Args>
C10_NOINLINE auto call_dispatched(T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  using R = decltype(module.forward(std::forward<Args>(args)...));
  torch::nn::Module& base = module;
  const NnHooks* global =
      global_hooks_active<torch::nn::Module>().load(std::memory_order_relaxed) != 0
          ? global_hooks<torch::nn::Module>().get()
          : nullptr;
  Dispatch<torch::nn::Module> dispatch = dispatch_for(module, global);
  if (dispatch.empty()) return module.forward(std::forward<Args>(args)...);

  auto backward_hook = dispatch.backward_hook(base, [&] { return base.weak_from_this().lock(); });
  if (dispatch.has_pre_hooks() || backward_hook) {
    // Pre-hooks may replace the arguments and the backward wiring wraps them: forward gets
    // copies, the caller's variables stay as they were.
    std::tuple<std::decay_t<Args>...> values(std::forward<Args>(args)...);
    return run_hooked<R, true>(module, dispatch, backward_hook, values);
  }
  // Forward hooks only: forward and the hooks see the caller's arguments themselves, and no
  // reference count moves for a copy.
  std::tuple<std::remove_reference_t<Args>&...> values(args...);
  return run_hooked<R, false>(module, dispatch, backward_hook, values);
}

/// `call` when some hook exists somewhere.
template <class T, class... Args>
C10_NOINLINE auto call_with_hooks(T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  using R = decltype(module.forward(std::forward<Args>(args)...));
  torch::nn::Module& base = module;
  if (C10_LIKELY(global_hooks_active<torch::nn::Module>().load(std::memory_order_relaxed) == 0 &&
                 hooked_modules.may_have_hooks(&base))) {
    const OwnForwardHooks own = own_forward_hooks_only(base);
    if (C10_LIKELY(own.only)) {
      if (C10_UNLIKELY(!own.forward)) return module.forward(std::forward<Args>(args)...);
      return run_forward_hooks_only<R>(module, *own.forward, args...);
    }
  }
  // Looks the module up a second time: the general path's pre-hook boxing and backward wiring
  // cost far more than that.
  return call_dispatched(module, std::forward<Args>(args)...);
}

}  // namespace detail

/// \addtogroup api_nn
/// @{

/// Runs `module` through its hooks: forward pre-hooks (global, then the module's), `forward`,
/// forward hooks, and the full-backward wiring; returns what `forward` returns.
///
/// libtorch calls `forward` directly (`ModuleHolder::operator()`, `torch::nn::Sequential`), so
/// hooks fire only through `call` (and modhooks' holders and `Sequential`). While no hook is
/// registered anywhere, `call` costs one relaxed atomic load over a direct `forward`; while
/// other modules have hooks, a module without any costs a hash and two more loads.
///
/// **Example**:
/// \code
///   torch::nn::Linear linear(4, 2);
///   auto handle = modhooks::register_forward_hook(linear, [](auto&, auto&, auto& out) {
///     std::cout << out.toTensor().mean() << "\n";
///   });
///   at::Tensor y = modhooks::call(linear, torch::randn({3, 4}));
/// \endcode
template <class M, class... Args, detail::IfNnModule<M> = 0>
auto call(M&& module, Args&&... args)
    -> decltype(detail::module_ref(module).forward(std::forward<Args>(args)...)) {
  auto& impl = detail::module_ref(module);
  if (C10_LIKELY(detail::call_hooks_active.load(std::memory_order_relaxed) == 0)) {
    return impl.forward(std::forward<Args>(args)...);
  }
  // Other modules have hooks: the filter slot of this one and the count of global hooks tell,
  // inline and without a lock, that most modules without hooks have none.
  const torch::nn::Module* base = &impl;  // the key hooks are filed under (bases are virtual)
  if (!detail::hooked_modules.may_have_hooks(base) &&
      detail::global_hooks_active<torch::nn::Module>().load(std::memory_order_relaxed) == 0) {
    return impl.forward(std::forward<Args>(args)...);
  }
  return detail::call_with_hooks(impl, std::forward<Args>(args)...);
}

/// @}

MODHOOKS_END_NAMESPACE
