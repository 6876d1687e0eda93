// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <c10/util/MaybeOwned.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/detail/inline.h"
#include "modhooks/core/detail/kinds.h"
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
  struct Borrow {};
  ShownValue(Borrow /*tag*/, const at::Tensor& tensor) noexcept
      : value_(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor)), borrowed_(true) {}
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
  /// Borrows `tensor` in place of the value held.
  void borrow(const at::Tensor& tensor) noexcept {
    replace(c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor)));
    borrowed_ = true;
  }
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

/// `hook_lists_generation` as a call reads it before it takes its snapshots: a list changed
/// meanwhile makes the snapshots look older than they are (and read again), never newer.
MODHOOKS_ALWAYS_INLINE inline std::uint64_t current_hook_lists_generation() noexcept {
  return hook_lists_generation.load(std::memory_order_acquire);
}

/// The snapshots of the global lists and of one module's, taken for one call (see `CallImpl`)
/// where nothing lends them, and the `hook_lists_generation` they were taken at.
template <class M>
struct CallSnapshots {
  /// None yet: the lists are taken with `global.take` and `local.take`.
  CallSnapshots() noexcept : generation(current_hook_lists_generation()) {}
  /// Snapshots the lists of `global` (null where no global hooks apply) and of `local` (the
  /// module's tables, null where it has none); neither is used afterwards. `local_guarded`: the
  /// caller holds the guard of `local`'s lists (see `HookList`).
  MODHOOKS_ALWAYS_INLINE CallSnapshots(const ModuleHooks<M>* global, const ModuleHooks<M>* local,
                                       bool local_guarded = false)
      : generation(current_hook_lists_generation()),
        global(global, false),
        local(local, local_guarded) {}
  /// Snapshots the lists of `global` alone; the module's may follow with `local.take`.
  MODHOOKS_ALWAYS_INLINE explicit CallSnapshots(const ModuleHooks<M>* global)
      : generation(current_hook_lists_generation()), global(global, false) {}
  /// Takes over snapshots taken elsewhere (a cache slot emptied).
  CallSnapshots(HookSnapshots<M>&& global, HookSnapshots<M>&& local) noexcept
      : global(std::move(global)), local(std::move(local)) {}

  std::uint64_t generation = 0;  // `hook_lists_generation`, read before the lists were
  HookSnapshots<M> global;
  HookSnapshots<M> local;
};

/// Whether `Op<T>` names something: what a contract check asks of each member.
template <class T, template <class> class Op, class = void>
struct Detected : std::false_type {};
template <class T, template <class> class Op>
struct Detected<T, Op, std::void_t<Op<T>>> : std::true_type {};

/// The members of a `Call` that `CallImpl` uses (its comment lists them).
namespace call_members {
template <class C>
using args = decltype(static_cast<const HookArgs&>(std::declval<C&>().args()));
template <class C>
using replace_args = decltype(std::declval<C&>().replace_args(std::declval<HookArgs&&>()));
template <class C>
using accept_args = decltype(std::declval<C&>().accept_args());
template <class C>
using forward = decltype(std::declval<C&>().forward());
template <class C>
using forward_args = decltype(static_cast<const HookArgs&>(std::declval<C&>().forward_args()));
template <class C>
using output = decltype(static_cast<ShownValue&>(std::declval<C&>().output()));
template <class C>
using accept_output = decltype(std::declval<C&>().accept_output());
template <class C>
using wire_inputs = decltype(std::declval<C&>().wire_inputs(std::declval<BackwardHookBase&>()));
template <class C>
using wire_output = decltype(std::declval<C&>().wire_output(std::declval<BackwardHookBase&>()));
template <class C>
using keep_alive = decltype(std::declval<C&>().keep_alive());
template <class M>
struct SnapshotListsOf {
  template <class C>
  using op = decltype(std::declval<C&>().snapshot_lists(std::declval<CallSnapshots<M>&>()));
};
}  // namespace call_members

/// Checks that `Call` meets the contract of `CallImpl` for modules of kind `M`, where `CallImpl`
/// takes it, so that an adapter that misses a member gets a message naming it rather than an
/// error deep in the hook sequence. `kRunsForward`: `CallImpl::run` calls `forward()` too.
template <class M, class Call, bool kRunsForward>
constexpr bool meets_call_contract() {
  using namespace call_members;  // NOLINT(google-build-using-namespace): the members' names
  static_assert(Detected<Call, args>::value, "a Call has const HookArgs& args()");
  static_assert(Detected<Call, replace_args>::value, "a Call has void replace_args(HookArgs&&)");
  static_assert(Detected<Call, accept_args>::value, "a Call has void accept_args()");
  static_assert(!kRunsForward || Detected<Call, forward>::value,
                "a Call that CallImpl::run runs has void forward()");
  static_assert(Detected<Call, forward_args>::value, "a Call has const HookArgs& forward_args()");
  static_assert(Detected<Call, output>::value, "a Call has ShownValue& output()");
  static_assert(Detected<Call, accept_output>::value, "a Call has void accept_output()");
  static_assert(Detected<Call, SnapshotListsOf<M>::template op>::value,
                "a Call has void snapshot_lists(CallSnapshots<M>&)");
  if constexpr (KindTraits<M>::backward) {
    static_assert(Detected<Call, keep_alive>::value,
                  "a Call of a kind with backward hooks has keep_alive()");
    static_assert(Detected<Call, wire_inputs>::value,
                  "a Call of a kind with backward hooks has void wire_inputs(BackwardHookBase&)");
    static_assert(Detected<Call, wire_output>::value,
                  "a Call of a kind with backward hooks has void wire_output(BackwardHookBase&)");
  }
  return true;
}

/// Python's `Module._call_impl`, written once for every kind of module: global then the module's
/// forward pre-hooks, the input side of the full-backward wiring, forward, global then the
/// module's forward hooks, the output side; on an exception anywhere in it, the always-call
/// forward hooks that have not started yet, whose own exceptions become warnings.
///
/// The lists are read when Python reads them: the pre-hooks and the backward lists when the call
/// starts (the snapshots it is given), the forward hooks after forward returns and the
/// always-call hooks when the call fails. Those two steps run the same snapshots while no hook
/// list changed since they were taken (`hook_lists_generation`, one relaxed load: the thread that
/// changed a list sees its own change); where one did (a pre-hook, forward or a forward hook
/// registered or removed a hook), they take the forward lists anew (`Call::snapshot_lists`),
/// out of the call's way. A hook registered by a pre-hook or by forward therefore runs in that
/// same call, and one they removed does not. The always-call hooks that started are told by
/// their ids, so that hooks registered or removed by forward hooks before one raised do not
/// shift them.
///
/// An adapter supplies only what its kind of module does differently, as a `Call` object:
/// \code
///   const HookArgs& args();           // what pre-hooks (and always-call hooks) see now
///   void replace_args(HookArgs&&);    // a pre-hook returned these
///   void accept_args();               // pre-hooks replaced the args: check and take them
///   void forward();                   // runs the module (only for `run`)
///   const HookArgs& forward_args();   // what forward hooks see: the args forward received
///   ShownValue& output();             // forward's result as hooks see it; None before it returned
///   void accept_output();             // forward hooks replaced output(): check and take it
///   // the lists changed during the call: take the global lists and the module's, as a call
///   // starting now would, into `fresh` (which holds none)
///   void snapshot_lists(CallSnapshots<M>& fresh);
///   // kinds with backward hooks (KindTraits<M>::backward):
///   std::shared_ptr<M> keep_alive();  // what keeps the module alive for the backward pass
///   void wire_inputs(BackwardHookBase&);
///   void wire_output(BackwardHookBase&);
/// \endcode
/// `run` is the whole call; adapters whose forward runs elsewhere (an inner call site of a
/// TorchScript graph, the boundary of a submodule compiled into a package) call `enter` and `exit`
/// around it, and `failed` where it threw.
template <class M>
class CallImpl {
 public:
  /// Runs the snapshots `global` and `local` (the module's), taken at `hook_lists_generation`
  /// `generation` (read before them), which must outlive this dispatch; the call takes no
  /// reference of its own (nn's call cache lends them, other kinds take `CallSnapshots` for
  /// each call).
  MODHOOKS_ALWAYS_INLINE CallImpl(const HookSnapshots<M>& global, const HookSnapshots<M>& local,
                                  std::uint64_t generation)
      : global_(&global),
        local_(&local),
        lists_(global.lists() | local.lists()),
        generation_(generation) {}
  MODHOOKS_ALWAYS_INLINE explicit CallImpl(const CallSnapshots<M>& snapshots)
      : CallImpl(snapshots.global, snapshots.local, snapshots.generation) {}
  CallImpl(const CallImpl&) = delete;
  CallImpl& operator=(const CallImpl&) = delete;

  bool has_pre_hooks() const { return (lists_ & Hooks::kForwardPre) != 0; }
  bool has_forward_hooks() const { return (lists_ & Hooks::kForward) != 0; }
  bool has_backward_hooks() const {
    return (lists_ & (Hooks::kBackwardPre | Hooks::kBackward)) != 0;
  }
  bool empty() const { return lists_ == 0; }
  /// Whether a hook list changed since the snapshots were taken (the forward hooks and the
  /// always-call hooks will be read anew).
  bool lists_changed() const {
    return hook_lists_generation.load(std::memory_order_relaxed) != generation_;
  }

  /// The whole call: `enter`, `call.forward()`, `exit`.
  template <class Call>
  MODHOOKS_ALWAYS_INLINE void run(M& module, Call& call) {
    static_assert(meets_call_contract<M, Call, true>());
    guarded(module, call, [&]() MODHOOKS_ALWAYS_INLINE {
      enter_steps(module, call);
      call.forward();
      exit_steps(module, call);
    });
  }

  /// The steps before forward: pre-hooks, their replacement checked, the input side of the
  /// backward wiring.
  template <class Call>
  void enter(M& module, Call& call) {
    static_assert(meets_call_contract<M, Call, false>());
    guarded(module, call, [&] { enter_steps(module, call); });
  }

  /// The steps after forward: forward hooks, their replacement checked, the output side of the
  /// backward wiring.
  template <class Call>
  void exit(M& module, Call& call) {
    static_assert(meets_call_contract<M, Call, false>());
    guarded(module, call, [&] { exit_steps(module, call); });
  }

  /// Forward threw between `enter` and `exit`: the always-call hooks, with `call.output()` None.
  template <class Call>
  void failed(M& module, Call& call) noexcept {
    try {
      run_always_called(module, call);
    } catch (...) {  // forward's own exception is the one that propagates
    }
  }

 private:
  /// Runs `steps`; where they throw, the always-call hooks that have not started, then the
  /// exception goes on.
  template <class Call, class Steps>
  MODHOOKS_ALWAYS_INLINE void guarded(M& module, Call& call, Steps&& steps) {
    try {
      steps();
    } catch (...) {
      run_always_called(module, call);
      throw;
    }
  }

  template <class Call>
  MODHOOKS_ALWAYS_INLINE void enter_steps(M& module, Call& call) {
    if constexpr (KindTraits<M>::backward) {
      if (MODHOOKS_UNLIKELY(has_backward_hooks())) make_backward_hook(module, call);
    }
    if (has_pre_hooks()) {
      if (MODHOOKS_UNLIKELY(global_->forward_pre() != nullptr)) {
        run_pre_hooks_cold(*global_->forward_pre(), module, call);
      }
      if (const auto* hooks = local_->forward_pre()) run_pre_hooks(*hooks, module, call);
      if (MODHOOKS_UNLIKELY(replaced_)) accept([&] { call.accept_args(); });
    }
    if constexpr (KindTraits<M>::backward) {
      if (MODHOOKS_UNLIKELY(backward_)) call.wire_inputs(*backward_);
    }
  }

  template <class Call>
  MODHOOKS_ALWAYS_INLINE void exit_steps(M& module, Call& call) {
    // Python reads the forward hooks now: a pre-hook or forward may have changed the lists.
    if (MODHOOKS_UNLIKELY(lists_changed())) snapshot_lists(call);
    if (MODHOOKS_LIKELY(has_forward_hooks())) {  // the most common kind of hook
      const HookArgs& args = call.forward_args();
      ShownValue& output = call.output();
      if (MODHOOKS_UNLIKELY(global_->forward() != nullptr)) {
        run_forward_hooks_cold(*global_->forward(), module, args, output);
      }
      if (const auto* hooks = local_->forward()) run_forward_hooks(*hooks, module, args, output);
      if (MODHOOKS_UNLIKELY(replaced_)) accept([&] { call.accept_output(); });
    }
    if constexpr (KindTraits<M>::backward) {
      if (MODHOOKS_UNLIKELY(backward_)) call.wire_output(*backward_);
    }
  }

  /// The node pair of the full-backward wiring. The backward pass outlives the call: its hooks get
  /// the module through what keeps it alive (a handle of its own for a TorchScript module, the
  /// owner of an nn one).
  template <class Call>
  MODHOOKS_COLD void make_backward_hook(M& module, Call& call) {
    std::shared_ptr<M> alive = call.keep_alive();
    M& hooked = alive ? *alive : module;
    backward_ = c10::make_intrusive<BackwardHook<M>>(hooked, std::move(alive), *global_, *local_);
  }

  /// The lists changed since the snapshots run were taken: takes them anew, through the call,
  /// and runs those from now on (the forward side: the backward lists stay the call's first).
  template <class Call>
  MODHOOKS_COLD void snapshot_lists(Call& call) {
    auto fresh = std::make_unique<CallSnapshots<M>>();
    call.snapshot_lists(*fresh);
    const std::uint32_t forward = (fresh->global.lists() | fresh->local.lists()) & Hooks::kForward;
    lists_ = (lists_ & ~static_cast<std::uint32_t>(Hooks::kForward)) | forward;
    global_ = &fresh->global;
    local_ = &fresh->local;
    generation_ = fresh->generation;
    fresh.swap(fresh_);  // the snapshots run before die here, after the switch
  }

  /// Runs the pre-hooks `hooks`; where one returns args, they replace the args shown to the next
  /// (`replaced_` says so).
  template <class Items, class Call>
  MODHOOKS_ALWAYS_INLINE void run_pre_hooks(const Items& hooks, M& module, Call& call) {
    for (const auto& entry : hooks) {
      std::optional<HookArgs> replacement = entry.hook(module, call.args());
      if (MODHOOKS_UNLIKELY(replacement.has_value())) replace_args(call, *replacement);
    }
  }
  /// The same for the global list, out of line: global hooks are rare beside a module's own.
  template <class Items, class Call>
  MODHOOKS_COLD void run_pre_hooks_cold(const Items& hooks, M& module, Call& call) {
    run_pre_hooks(hooks, module, call);
  }
  /// A pre-hook's replacement, out of the hooked call's way (hooks that replace are rare).
  template <class Call>
  MODHOOKS_COLD void replace_args(Call& call, HookArgs& args) {
    call.replace_args(std::move(args));
    replaced_ = true;
  }

  /// Runs the forward hooks `hooks`, counting each in `started_`; where one returns a value, it
  /// replaces `output` (`replaced_` says so).
  template <class Items>
  MODHOOKS_ALWAYS_INLINE void run_forward_hooks(const Items& hooks, M& module, const HookArgs& args,
                                                ShownValue& output) {
    for (const auto& entry : hooks) {
      ++started_;  // before the call: a hook that raises is not run again by the error path
      std::optional<c10::IValue> replacement = entry.hook.fn(module, args, output.get());
      if (MODHOOKS_UNLIKELY(replacement.has_value())) replace_output(output, *replacement);
    }
  }
  template <class Items>
  MODHOOKS_COLD void run_forward_hooks_cold(const Items& hooks, M& module, const HookArgs& args,
                                            ShownValue& output) {
    run_forward_hooks(hooks, module, args, output);
  }
  /// A forward hook's replacement, out of the hooked call's way.
  MODHOOKS_COLD void replace_output(ShownValue& output, c10::IValue& value) {
    output.replace(std::move(value));
    replaced_ = true;
  }

  /// Hooks replaced what the call shows: `take` (the call's check of args or output) takes it.
  template <class Take>
  MODHOOKS_COLD void accept(Take&& take) {
    replaced_ = false;
    take();
  }

  /// Python's exception path: the always-call forward hooks that have not started, global ones
  /// first, on the args as they are and the output (None where forward did not return). Python
  /// reads the lists now, and tells the hooks that started by their ids.
  template <class Call>
  MODHOOKS_COLD void run_always_called(M& module, Call& call) {
    std::vector<std::uint64_t> started;  // the ids of the forward hooks that started
    for (const auto* hooks : {global_->forward(), local_->forward()}) {
      if (hooks == nullptr) continue;
      for (const auto& entry : *hooks) {
        if (started.size() == started_) break;
        started.push_back(entry.id);
      }
    }
    if (lists_changed()) snapshot_lists(call);
    const HookArgs& args = call.args();
    ShownValue& output = call.output();
    const auto run = [&](const auto* hooks, const char* kind) {
      if (hooks == nullptr) return;
      for (const auto& entry : *hooks) {
        if (!entry.hook.always_call ||
            std::find(started.begin(), started.end(), entry.id) != started.end()) {
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
    };
    run(global_->forward(), "global module ");
    run(local_->forward(), "module ");
  }

  using Hooks = ModuleHooks<M>;

  const HookSnapshots<M>* global_;  // the global lists it runs
  const HookSnapshots<M>* local_;   // the module's

  std::uint32_t lists_;       // which lists the snapshots hold hooks in (`ModuleHooks::List`)
  bool replaced_ = false;     // hooks replaced the args or the output, not accepted yet
  std::uint64_t generation_;  // `hook_lists_generation` when the snapshots run were taken
  c10::intrusive_ptr<BackwardHookBase> backward_;
  std::size_t started_ = 0;                  // forward hooks started, in the order they run
  std::unique_ptr<CallSnapshots<M>> fresh_;  // the lists taken anew, where they changed
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
