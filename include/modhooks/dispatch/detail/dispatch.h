// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <c10/util/MaybeOwned.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/dispatch/detail/backward_hook.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// A value shown to hooks that may borrow its object: it holds the object without a reference
/// count of its own (two atomic operations fewer per hooked call) while the owner, forward's
/// arguments or result, outlives it. Hooks receive it as `const&`; one that keeps it copies it,
/// which takes a reference as usual. Replacing the value drops the borrow without releasing it.
class ShownValue {
 public:
  ShownValue() noexcept : value_() {}
  explicit ShownValue(c10::IValue owned) noexcept : value_(std::move(owned)) {}
  /// Borrows `tensor`, which must outlive this value or its next `replace`.
  MODHOOKS_ALWAYS_INLINE static ShownValue borrowing(const at::Tensor& tensor) noexcept {
    ShownValue shown(c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor)));
    shown.borrowed_ = true;
    return shown;
  }
  ShownValue(ShownValue&& other) noexcept
      : value_(std::move(other.value_)), borrowed_(std::exchange(other.borrowed_, false)) {}
  ShownValue& operator=(ShownValue&&) = delete;
  /// A borrowed value is forgotten, not destroyed: `c10::IValue`'s destructor is an out-of-line
  /// call that a hooked call would make for nothing (the union keeps the compiler from making it).
  MODHOOKS_ALWAYS_INLINE ~ShownValue() {
    if (borrowed_) {
      c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(value_);  // no release
    } else {
      value_.~IValue();
    }
  }

  const c10::IValue& get() const noexcept { return value_; }
  void replace(c10::IValue value) noexcept {
    drop_borrow();
    value_ = std::move(value);
  }
  /// The value, made owned (a borrowed object gets its reference now).
  c10::IValue& owned() {
    if (borrowed_) {
      c10::IValue copy = value_;
      replace(std::move(copy));
    }
    return value_;
  }

 private:
  void drop_borrow() noexcept {
    if (borrowed_) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(value_);  // no release
    borrowed_ = false;
  }
  union {
    c10::IValue value_;
  };
  bool borrowed_ = false;
};

/// The hook side of one call, Python's `_call_impl` without the forward itself: the lists are
/// snapshotted when the call starts, so hooks registered or removed meanwhile do not affect it.
/// `call` for nn modules (typed arguments) and for TorchScript modules (IValues) both run it.
template <class M>
class Dispatch {
 public:
  /// Snapshots the lists of `global` (null where no global hooks apply) and of `local` (the
  /// module's tables, null where it has none); neither is used after the constructor.
  /// `local_guarded`: the caller holds the guard of `local`'s lists (see `HookList`).
  Dispatch(const ModuleHooks<M>* global, const ModuleHooks<M>* local, bool local_guarded = false)
      : global_(global, false), local_(local, local_guarded) {}

  bool has_pre_hooks() const { return any(global_.forward_pre) || any(local_.forward_pre); }
  bool has_forward_hooks() const { return any(global_.forward) || any(local_.forward); }
  bool has_backward_hooks() const {
    return any(global_.backward_pre) || any(global_.backward) || any(local_.backward_pre) ||
           any(local_.backward);
  }
  bool empty() const { return !has_pre_hooks() && !has_forward_hooks() && !has_backward_hooks(); }

  /// The full-backward wiring of this call, or null when no backward hook exists.
  /// `keep_alive()` gives what keeps the module alive for the backward pass; it is asked only
  /// when a backward hook exists (taking a shared_ptr costs a hooked call atomic operations).
  template <class KeepAlive>
  c10::intrusive_ptr<BackwardHookBase> backward_hook(M& module, KeepAlive&& keep_alive) {
    if (!has_backward_hooks()) return {};
    return c10::make_intrusive<BackwardHook<M>>(module, keep_alive(), global_, local_);
  }

  /// Global, then the module's pre-hooks; each sees the args the previous one left. Returns
  /// whether any replaced them.
  bool run_pre_hooks(M& module, std::vector<c10::IValue>& args) {
    bool replaced_any = false;
    for (const auto* list : {&global_.forward_pre, &local_.forward_pre}) {
      if (!*list) continue;
      for (const auto& entry : **list) {
        if (auto replaced = entry.hook(module, args)) {
          args = std::move(*replaced);
          replaced_any = true;
        }
      }
    }
    return replaced_any;
  }

  /// Global, then the module's forward hooks; returns whether any replaced `output`.
  bool run_forward_hooks(M& module, const std::vector<c10::IValue>& args, ShownValue& output) {
    bool replaced_any = false;
    for (const auto* list : {&global_.forward, &local_.forward}) {
      if (!*list) continue;
      for (const auto& entry : **list) {
        // Marked before the call: a hook that raises is not run again by the error path.
        if (entry.hook.always_call) always_called_.push_back(entry.id);
        if (auto replaced = entry.hook.fn(module, args, output.get())) {
          output.replace(std::move(*replaced));
          replaced_any = true;
        }
      }
    }
    return replaced_any;
  }

  /// Python's exception path: always-call forward hooks that have not run yet run now, global
  /// ones first; an exception they raise becomes a warning, so the original error is the one
  /// that propagates.
  void run_always_called(M& module, const std::vector<c10::IValue>& args, ShownValue& output) {
    run_always_called(module, global_.forward, "global module ", args, output);
    run_always_called(module, local_.forward, "module ", args, output);
  }

 private:
  using Forward = typename HookList<ForwardHookEntry<M>>::Snapshot;

  template <class Snapshot>
  static bool any(const Snapshot& s) {
    return s && !s->empty();
  }

  void run_always_called(M& module, const Forward& hooks, const char* kind,
                         const std::vector<c10::IValue>& args, ShownValue& output) {
    if (!hooks) return;
    for (const auto& entry : *hooks) {
      if (!entry.hook.always_call || std::find(always_called_.begin(), always_called_.end(),
                                               entry.id) != always_called_.end()) {
        continue;
      }
      try {
        if (auto replaced = entry.hook.fn(module, args, output.get())) {
          output.replace(std::move(*replaced));
        }
      } catch (const std::exception& e) {
        TORCH_WARN(kind,
                   "forward hook with ``always_call=True`` raised an exception that was "
                   "silenced as another error was raised in forward: ",
                   e.what());
      }
    }
  }

  HookSnapshots<M> global_;
  HookSnapshots<M> local_;
  std::vector<std::uint64_t> always_called_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
