// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/detail/inline.h"
#include "modhooks/dispatch/hook_types.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

using HookArgs = std::vector<c10::IValue>;

/// The normalised form every user hook is stored in: the callable adapted at registration, so
/// dispatch only iterates ready-to-call functions. `M` is the module type hooks receive
/// (`torch::nn::Module`, or `torch::jit::Module` for TorchScript).
template <class M>
using ForwardPreHookFn =
    std::function<std::optional<std::vector<c10::IValue>>(M&, const std::vector<c10::IValue>&)>;

template <class M>
struct ForwardHookEntry {
  std::function<std::optional<c10::IValue>(M&, const std::vector<c10::IValue>&, const c10::IValue&)>
      fn;
  bool always_call = false;
};

template <class M>
using BackwardPreHookFn = std::function<std::optional<TensorList>(M&, const TensorList&)>;

template <class M>
using BackwardHookFn =
    std::function<std::optional<TensorList>(M&, const TensorList&, const TensorList&)>;

/// The hook tables of one module, or the global ones. Every list counts into
/// `call_hooks_active`, which keeps `call` on its fast path while nothing is registered.
/// `observer`, when given, hears of every hook added or removed (see `HookObserver`); the
/// tables keep it alive.
///
/// Aligned to a cache line, so that the word of kinds and the forward list's snapshot pointer
/// after it, all that a call with forward hooks only reads of its tables, share one line.
template <class M>
struct alignas(64) ModuleHooks {
  /// The bits of `kinds`: which lists hold hooks.
  enum Kind : std::uint32_t {
    kForward = 1,
    kForwardPre = 2,
    kBackwardPre = 4,
    kBackward = 8,
  };

  /// `guard`, when given, guards the lists instead of their own locks (see `HookList`).
  explicit ModuleHooks(std::shared_ptr<HookObserver> observer = nullptr, SpinLock* guard = nullptr)
      : observer(std::move(observer)), guard(guard) {}

  /// No hook in any list (a relaxed load: a hook added meanwhile may or may not be seen).
  bool empty() const noexcept { return kinds.load(std::memory_order_relaxed) == 0; }

  std::shared_ptr<HookObserver> observer;  // declared first: the lists report to it as they die
  SpinLock* guard;
  std::atomic<std::uint32_t> kinds{0};  // `Kind` bits, kept by the lists
  HookList<ForwardHookEntry<M>> forward{&call_hooks_active, observer.get(), guard,
                                        KindBits{&kinds, kForward}};
  HookList<ForwardPreHookFn<M>> forward_pre{&call_hooks_active, observer.get(), guard,
                                            KindBits{&kinds, kForwardPre}};
  HookList<BackwardPreHookFn<M>> backward_pre{&call_hooks_active, observer.get(), guard,
                                              KindBits{&kinds, kBackwardPre}};
  HookList<BackwardHookFn<M>> backward{&call_hooks_active, observer.get(), guard,
                                       KindBits{&kinds, kBackward}};
};

/// The lists of one `ModuleHooks` as one call sees them: snapshots taken when the call starts,
/// so that the call needs no reference to the tables themselves (each reference costs a hooked
/// call two atomic operations). Empty lists are null; which lists hold hooks is read from the
/// tables' word of kinds, so that a call touches the cache lines of those lists only.
template <class M>
struct HookSnapshots {
  HookSnapshots() = default;
  /// `hooks` may be null (no tables); it is not used after the constructor. `guarded`: the
  /// caller holds the tables' guard.
  MODHOOKS_ALWAYS_INLINE HookSnapshots(const ModuleHooks<M>* hooks, bool guarded)
      : HookSnapshots(hooks, hooks ? hooks->kinds.load(std::memory_order_relaxed) : 0, guarded) {}
  MODHOOKS_ALWAYS_INLINE ~HookSnapshots() = default;
  HookSnapshots(const HookSnapshots&) = default;
  HookSnapshots(HookSnapshots&&) noexcept = default;
  HookSnapshots& operator=(const HookSnapshots&) = default;
  HookSnapshots& operator=(HookSnapshots&&) noexcept = default;

  typename HookList<ForwardPreHookFn<M>>::Snapshot forward_pre;
  typename HookList<ForwardHookEntry<M>>::Snapshot forward;
  typename HookList<BackwardPreHookFn<M>>::Snapshot backward_pre;
  typename HookList<BackwardHookFn<M>>::Snapshot backward;
  /// The `ModuleHooks::Kind` bits of the lists that held hooks when the snapshots were taken.
  std::uint32_t kinds = 0;

 private:
  /// Each snapshot made in place, from the word of kinds read once.
  MODHOOKS_ALWAYS_INLINE HookSnapshots(const ModuleHooks<M>* hooks, std::uint32_t kinds,
                                       bool guarded)
      : forward_pre(take(hooks, &ModuleHooks<M>::forward_pre, kinds & ModuleHooks<M>::kForwardPre,
                         guarded)),
        forward(take(hooks, &ModuleHooks<M>::forward, kinds & ModuleHooks<M>::kForward, guarded)),
        backward_pre(take(hooks, &ModuleHooks<M>::backward_pre,
                          kinds & ModuleHooks<M>::kBackwardPre, guarded)),
        backward(
            take(hooks, &ModuleHooks<M>::backward, kinds & ModuleHooks<M>::kBackward, guarded)),
        kinds(kinds) {}

  template <class Hook>
  MODHOOKS_ALWAYS_INLINE static typename HookList<Hook>::Snapshot take(
      const ModuleHooks<M>* hooks, HookList<Hook> ModuleHooks<M>::*list, bool nonempty,
      bool guarded) {
    if (!nonempty) return nullptr;
    return guarded ? (hooks->*list).snapshot_guarded() : (hooks->*list).snapshot();
  }
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
