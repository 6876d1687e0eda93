// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
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

/// The hook lists of one module, or the global ones. Every list counts into
/// `call_hooks_active`, which keeps `call` on its fast path while nothing is registered.
/// `observer`, when given, hears of every hook added or removed (see `HookObserver`); the
/// tables keep it alive.
///
/// Aligned to a cache line, so that the word of lists and the forward list's snapshot pointer
/// after it, all that a call with forward hooks only reads of its lists, share one line.
template <class M>
struct alignas(64) ModuleHooks {
  /// The bits of `lists`: which lists hold hooks.
  enum List : std::uint32_t {
    kForward = 1,
    kForwardPre = 2,
    kBackwardPre = 4,
    kBackward = 8,
  };

  /// `guard`, when given, guards the lists instead of their own locks (see `HookList`).
  explicit ModuleHooks(std::shared_ptr<HookObserver> observer = nullptr, SpinLock* guard = nullptr)
      : observer(std::move(observer)), guard(guard) {}

  /// No hook in any list (a relaxed load: a hook added meanwhile may or may not be seen).
  bool empty() const noexcept { return lists.load(std::memory_order_relaxed) == 0; }

  std::shared_ptr<HookObserver> observer;  // declared first: the lists report to it as they die
  SpinLock* guard;
  std::atomic<std::uint32_t> lists{0};  // `List` bits, kept by the lists
  HookList<ForwardHookEntry<M>> forward{&call_hooks_active, observer.get(), guard,
                                        ListBits{&lists, kForward}};
  HookList<ForwardPreHookFn<M>> forward_pre{&call_hooks_active, observer.get(), guard,
                                            ListBits{&lists, kForwardPre}};
  HookList<BackwardPreHookFn<M>> backward_pre{&call_hooks_active, observer.get(), guard,
                                              ListBits{&lists, kBackwardPre}};
  HookList<BackwardHookFn<M>> backward{&call_hooks_active, observer.get(), guard,
                                       ListBits{&lists, kBackward}};
};

/// The lists of one `ModuleHooks` as one call sees them: snapshots taken when the call starts,
/// so that the call needs no reference to the lists themselves (each reference costs a hooked
/// call two atomic operations). Only the lists that held hooks are snapshotted, read from the
/// word of lists: a call touches the cache lines of those lists alone.
template <class M>
class HookSnapshots {
  using Hooks = ModuleHooks<M>;
  template <class Hook>
  using Snapshot = typename HookList<Hook>::Snapshot;
  template <class Hook>
  using Items = typename HookList<Hook>::Items;

 public:
  /// No lists.
  HookSnapshots() noexcept = default;
  /// The lists of `hooks`; see `take`.
  MODHOOKS_ALWAYS_INLINE HookSnapshots(const ModuleHooks<M>* hooks, bool guarded) {
    take(hooks, guarded);
  }
  /// Snapshots the lists of `hooks` into these, which hold none yet. `hooks` may be null (no
  /// tables); it is not used afterwards. `guarded`: the caller holds the lists' guard.
  MODHOOKS_ALWAYS_INLINE void take(const ModuleHooks<M>* hooks, bool guarded) {
    lists_ = hooks ? hooks->lists.load(std::memory_order_relaxed) : 0;
    if (lists_ == 0) return;
    take(forward_, hooks->forward, Hooks::kForward, guarded);
    take(forward_pre_, hooks->forward_pre, Hooks::kForwardPre, guarded);
    if (MODHOOKS_UNLIKELY((lists_ & kBackwardLists) != 0)) take_backward(*hooks, guarded);
  }
  HookSnapshots(HookSnapshots&& other) noexcept
      : lists_(std::exchange(other.lists_, 0)),
        forward_(std::move(other.forward_)),
        forward_pre_(std::move(other.forward_pre_)),
        backward_pre_(std::move(other.backward_pre_)),
        backward_(std::move(other.backward_)) {}
  HookSnapshots(const HookSnapshots&) = delete;
  HookSnapshots& operator=(const HookSnapshots&) = delete;
  HookSnapshots& operator=(HookSnapshots&&) = delete;
  MODHOOKS_ALWAYS_INLINE ~HookSnapshots() = default;

  /// The `ModuleHooks::List` bits of the lists snapshotted (non-empty when the call started).
  std::uint32_t lists() const noexcept { return lists_; }
  /// Each list's hooks, null where it held none.
  const Items<ForwardHookEntry<M>>* forward() const noexcept {
    return (lists_ & Hooks::kForward) != 0 ? &*forward_ : nullptr;
  }
  const Items<ForwardPreHookFn<M>>* forward_pre() const noexcept {
    return (lists_ & Hooks::kForwardPre) != 0 ? &*forward_pre_ : nullptr;
  }
  /// Shares of the backward lists' snapshots (null where empty), for the backward pass.
  Snapshot<BackwardPreHookFn<M>> backward_pre() const noexcept { return backward_pre_; }
  Snapshot<BackwardHookFn<M>> backward() const noexcept { return backward_; }

 private:
  static constexpr std::uint32_t kBackwardLists = Hooks::kBackwardPre | Hooks::kBackward;

  /// Takes the snapshot of `list` into `slot` where `bit` is set; a list emptied since the word
  /// was read leaves its bit cleared and its slot null.
  template <class Hook>
  MODHOOKS_ALWAYS_INLINE void take(Snapshot<Hook>& slot, const HookList<Hook>& list,
                                   std::uint32_t bit, bool guarded) {
    if ((lists_ & bit) == 0) return;
    slot = guarded ? list.snapshot_guarded() : list.snapshot();
    if (MODHOOKS_UNLIKELY(!slot)) lists_ &= ~bit;
  }
  MODHOOKS_COLD void take_backward(const ModuleHooks<M>& hooks, bool guarded) {
    take(backward_pre_, hooks.backward_pre, Hooks::kBackwardPre, guarded);
    take(backward_, hooks.backward, Hooks::kBackward, guarded);
  }

  std::uint32_t lists_ = 0;
  Snapshot<ForwardHookEntry<M>> forward_;  // each null where its bit of `lists_` is clear
  Snapshot<ForwardPreHookFn<M>> forward_pre_;
  Snapshot<BackwardPreHookFn<M>> backward_pre_;
  Snapshot<BackwardHookFn<M>> backward_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
