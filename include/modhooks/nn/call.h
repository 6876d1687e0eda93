// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
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

/// How a call of an nn module shows itself to the hook sequence (see `CallImpl`): forward's typed
/// arguments and result, boxed for hooks without copies. Hooks see the caller's arguments
/// themselves, borrowed (see `ShownArgs`) into a vector the caller lends, and no reference count
/// moves for them; forward gets copies only where a pre-hook replaced them or the backward wiring
/// wraps them, so the caller's variables stay as they were. The arguments are shown when the call
/// starts, and shown again whenever forward's own change.
template <class T, class R, class... Args>
class NnCall {
  using Values = std::tuple<std::decay_t<Args>...>;  // copies forward runs on, when needed
  using Refs = std::tuple<std::remove_reference_t<Args>&...>;
  using Pointers = std::tuple<std::remove_reference_t<Args>*...>;  // what forward runs on

 public:
  MODHOOKS_ALWAYS_INLINE NnCall(T& module, HookArgs& shown, Args&... args)
      : module_(module), args_(&args...), shown_(shown) {
    show_args();
  }

  MODHOOKS_ALWAYS_INLINE const HookArgs& args() {
    if (MODHOOKS_UNLIKELY(replaced_.has_value())) return *replaced_;
    return shown_.get();
  }
  MODHOOKS_COLD void replace_args(HookArgs&& args) { replaced_ = std::move(args); }
  MODHOOKS_COLD void accept_args() {
    torch::nn::Module& base = module_;
    edit_values([&](Values& values) {
      unbox_replacement("forward pre-hook", base, [&] { unbox_all(*replaced_, values); });
    });
    replaced_.reset();
  }
  MODHOOKS_ALWAYS_INLINE void forward() {
    result_.emplace(std::apply([&](auto*... a) -> R { return module_.forward(*a...); }, args_));
  }
  MODHOOKS_ALWAYS_INLINE const HookArgs& forward_args() { return shown_.get(); }
  MODHOOKS_ALWAYS_INLINE ShownValue& output() {
    if (MODHOOKS_LIKELY(!output_)) {  // made once, by the forward hooks' step
      if constexpr (std::is_same_v<R, at::Tensor>) {
        if (result_) {
          output_.emplace(ShownValue::Borrow{}, *result_);
        } else {
          output_.emplace();
        }
      } else {
        output_.emplace(result_ ? box(*result_) : c10::IValue());
      }
    }
    return *output_;
  }
  MODHOOKS_COLD void accept_output() {
    torch::nn::Module& base = module_;
    unbox_replacement("forward hook", base, [&] { unbox_into(output_->get(), *result_); });
  }
  /// The lists as a call starting now takes them: hooks changed them during this one.
  MODHOOKS_COLD void snapshot_lists(CallSnapshots<torch::nn::Module>& fresh) {
    fresh.global.take(global_hooks_if_any<torch::nn::Module>(), /*guarded=*/false);
    take_module_hooks(module_, fresh.local);
  }
  std::shared_ptr<torch::nn::Module> keep_alive() {
    torch::nn::Module& base = module_;
    return base.weak_from_this().lock();
  }
  MODHOOKS_COLD void wire_inputs(BackwardHookBase& hook) {
    edit_values([&](Values& values) { wrap_tuple(hook, values, /*output_side=*/false); });
  }
  MODHOOKS_COLD void wire_output(BackwardHookBase& hook) {
    output_.reset();  // it may borrow what the wiring replaces
    wrap_output(hook, *result_);
  }

  MODHOOKS_ALWAYS_INLINE R result() { return std::move(*result_); }

 private:
  MODHOOKS_ALWAYS_INLINE void show_args() {
    shown_.show(std::apply([](auto*... a) { return Refs(*a...); }, args_));
  }
  /// Forward runs on copies from now on (made once), which `edit` changes; hooks see them after,
  /// and where `edit` throws, what it left of them.
  template <class Edit>
  void edit_values(Edit&& edit) {
    shown_.hide();
    try {
      if (!values_) {
        values_.emplace(std::apply([](auto*... a) { return Values(*a...); }, args_));
        args_ = std::apply([](auto&... v) { return Pointers(&v...); }, *values_);
      }
      edit(*values_);
    } catch (...) {
      show_args();
      throw;
    }
    show_args();
  }

  // What every hooked call touches first, what the rare steps touch last.
  T& module_;
  Pointers args_;          // the caller's arguments, or `values_`
  ShownArgs<Refs> shown_;  // the args hooks see, borrowed from `args_`
  std::optional<R> result_;
  std::optional<ShownValue> output_;  // what forward hooks see, borrowed from `result_`
  std::optional<Values> values_;
  std::optional<HookArgs> replaced_;  // a pre-hook's replacement, until accepted
};

/// The hooked call of `module` under `sequence`'s snapshots, showing its arguments in `shown`
/// (Nones, see `ShownArgs`).
template <class T, class... Args>
MODHOOKS_ALWAYS_INLINE inline auto run_hooked(CallImpl<torch::nn::Module>& sequence,
                                              HookArgs& shown, T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  using R = decltype(module.forward(std::forward<Args>(args)...));
  NnCall<T, R, Args...> call(module, shown, args...);
  sequence.run(module, call);
  return call.result();
}

/// `call_with_hooks` where this thread's cache cannot lend the snapshots (see `cached_call`):
/// the call takes its own, and a vector of its own to show its arguments in.
template <class T, class... Args>
MODHOOKS_NOINLINE auto call_with_own_snapshots(T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  CallSnapshots<torch::nn::Module> snapshots(global_hooks_if_any<torch::nn::Module>());
  take_module_hooks(module, snapshots.local);
  CallImpl<torch::nn::Module> sequence(snapshots);
  if (MODHOOKS_UNLIKELY(sequence.empty())) return module.forward(std::forward<Args>(args)...);
  HookArgs shown;
  return run_hooked(sequence, shown, module, std::forward<Args>(args)...);
}

/// Clears the pin of a cached call when the call ends, and drops the snapshots if hook
/// lists changed meanwhile.
class PinnedCall {
 public:
  MODHOOKS_ALWAYS_INLINE explicit PinnedCall(CachedCall& slot) noexcept : slot_(slot) {}
  MODHOOKS_ALWAYS_INLINE ~PinnedCall() {
    slot_.busy = false;
    if (MODHOOKS_UNLIKELY(slot_.generation !=
                          hook_lists_generation.load(std::memory_order_relaxed))) {
      release_stale_dispatch(slot_);
    }
  }
  PinnedCall(const PinnedCall&) = delete;
  PinnedCall& operator=(const PinnedCall&) = delete;

 private:
  CachedCall& slot_;
};

/// `call` when some hook exists somewhere: the module's and the global hook lists, borrowed from
/// this thread's cache, around `forward` (`CallImpl::run`).
template <class T, class... Args>
MODHOOKS_NOINLINE auto call_with_hooks(T& module, Args&&... args)
    -> decltype(module.forward(std::forward<Args>(args)...)) {
  CachedCall* cached = cached_call(module);
  if (MODHOOKS_UNLIKELY(cached == nullptr)) {
    return call_with_own_snapshots(module, std::forward<Args>(args)...);
  }
  const PinnedCall pinned(*cached);
  CallImpl<torch::nn::Module> sequence(cached->global, cached->local, cached->generation);
  if (MODHOOKS_UNLIKELY(sequence.empty())) return module.forward(std::forward<Args>(args)...);
  return run_hooked(sequence, cached->shown_args, module, std::forward<Args>(args)...);
}

/// What keeps the module a caller named alive for its call, as Python's `_call_impl` holds
/// `self`: a hook may drop the module's last owner, and the module dies when the call returns.
/// The owner the caller named (a holder, a `std::shared_ptr`) costs a reference count; a module
/// named by reference is found through `shared_from_this` (none where no `std::shared_ptr` owns
/// it: a module on the stack, which no hook can drop).
template <class T>
MODHOOKS_ALWAYS_INLINE inline const std::shared_ptr<T>& owner_of(
    const torch::nn::ModuleHolder<T>& module) noexcept {
  return module.ptr();
}
template <class T>
MODHOOKS_ALWAYS_INLINE inline const std::shared_ptr<T>& owner_of(
    const std::shared_ptr<T>& module) noexcept {
  return module;
}
MODHOOKS_COLD inline std::shared_ptr<torch::nn::Module> owner_of(torch::nn::Module& module) {
  try {
    return module.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    return nullptr;
  }
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
  if (MODHOOKS_LIKELY(detail::call_hooks_active.load(std::memory_order_relaxed) == 0)) {
    return impl.forward(std::forward<Args>(args)...);
  }
  // Other modules have hooks: the filter slot of this one and the count of global hooks tell,
  // inline and without a lock, that most modules without hooks have none.
  const torch::nn::Module* base = &impl;  // the key hooks are filed under (bases are virtual)
  if (!detail::hooked_modules.may_have_hooks(base) &&
      !detail::any_global_hooks<torch::nn::Module>()) {
    return impl.forward(std::forward<Args>(args)...);
  }
  const auto alive = detail::owner_of(module);  // a copy: the caller's owner may be dropped
  return detail::call_with_hooks(impl, std::forward<Args>(args)...);
}

/// @}

MODHOOKS_END_NAMESPACE
