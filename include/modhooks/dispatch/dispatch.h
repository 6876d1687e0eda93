// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "modhooks/dispatch/backward_hook.h"
#include "modhooks/dispatch/hook_types.h"

namespace modhooks {
namespace detail {

/// The hook side of one call, Python's `_call_impl` without the forward itself: the tables are
/// snapshotted when the call starts, so hooks registered or removed meanwhile do not affect it.
/// `call` for nn modules (typed arguments) and for TorchScript modules (IValues) both run it.
template <class M>
class Dispatch {
 public:
  /// `global` is null where no global hooks apply.
  Dispatch(const ModuleHooks<M>* global, std::shared_ptr<ModuleHooks<M>> local)
      : global_(global),
        local_(std::move(local)),
        global_pre_(global ? global->forward_pre.snapshot() : nullptr),
        global_fwd_(global ? global->forward.snapshot() : nullptr),
        local_pre_(local_ ? local_->forward_pre.snapshot() : nullptr),
        local_fwd_(local_ ? local_->forward.snapshot() : nullptr) {}

  bool has_pre_hooks() const { return any(global_pre_) || any(local_pre_); }
  bool has_forward_hooks() const { return any(global_fwd_) || any(local_fwd_); }
  bool has_backward_hooks() const {
    return (global_ && (!global_->backward_pre.empty() || !global_->backward.empty())) ||
           (local_ && (!local_->backward_pre.empty() || !local_->backward.empty()));
  }
  bool empty() const { return !has_pre_hooks() && !has_forward_hooks() && !has_backward_hooks(); }

  /// The full-backward wiring of this call, or null when no backward hook exists.
  /// `keep_alive()` gives what keeps the module alive for the backward pass; it is asked only
  /// when a backward hook exists (taking a shared_ptr costs a hooked call atomic operations).
  template <class KeepAlive>
  c10::intrusive_ptr<BackwardHookBase> backward_hook(M& module, KeepAlive&& keep_alive) {
    if (!has_backward_hooks()) return {};
    return c10::make_intrusive<BackwardHook<M>>(module, keep_alive(), global_, local_.get());
  }

  /// Global, then the module's pre-hooks; each sees the args the previous one left. Returns
  /// whether any replaced them.
  bool run_pre_hooks(M& module, std::vector<c10::IValue>& args) {
    bool replaced_any = false;
    for (const auto* list : {&global_pre_, &local_pre_}) {
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
  bool run_forward_hooks(M& module, const std::vector<c10::IValue>& args, c10::IValue& output) {
    bool replaced_any = false;
    for (const auto* list : {&global_fwd_, &local_fwd_}) {
      if (!*list) continue;
      for (const auto& entry : **list) {
        // Marked before the call: a hook that raises is not run again by the error path.
        if (entry.hook.always_call) always_called_.push_back(entry.id);
        if (auto replaced = entry.hook.fn(module, args, output)) {
          output = std::move(*replaced);
          replaced_any = true;
        }
      }
    }
    return replaced_any;
  }

  /// Python's exception path: always-call forward hooks that have not run yet run now, global
  /// ones first; an exception they raise becomes a warning, so the original error is the one
  /// that propagates.
  void run_always_called(M& module, const std::vector<c10::IValue>& args, c10::IValue& output) {
    run_always_called(module, global_fwd_, "global module ", args, output);
    run_always_called(module, local_fwd_, "module ", args, output);
  }

 private:
  using ForwardPre = typename HookList<ForwardPreHookFn<M>>::Snapshot;
  using Forward = typename HookList<ForwardHookEntry<M>>::Snapshot;

  template <class Snapshot>
  static bool any(const Snapshot& s) {
    return s && !s->empty();
  }

  void run_always_called(M& module, const Forward& hooks, const char* kind,
                         const std::vector<c10::IValue>& args, c10::IValue& output) {
    if (!hooks) return;
    for (const auto& entry : *hooks) {
      if (!entry.hook.always_call || std::find(always_called_.begin(), always_called_.end(),
                                               entry.id) != always_called_.end()) {
        continue;
      }
      try {
        if (auto replaced = entry.hook.fn(module, args, output)) output = std::move(*replaced);
      } catch (const std::exception& e) {
        TORCH_WARN(kind,
                   "forward hook with ``always_call=True`` raised an exception that was "
                   "silenced as another error was raised in forward: ",
                   e.what());
      }
    }
  }

  const ModuleHooks<M>* global_;
  std::shared_ptr<ModuleHooks<M>> local_;
  ForwardPre global_pre_;
  Forward global_fwd_;
  ForwardPre local_pre_;
  Forward local_fwd_;
  std::vector<std::uint64_t> always_called_;
};

}  // namespace detail
}  // namespace modhooks
