// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/function.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/jit/detail/registry.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// One place a TorchScript module is called from: the top-level `call`, or a call site inside a
/// parent's method. Hooks' replacements are checked against its types, so a wrong one is a
/// `modhooks::Error` that names the module instead of a failure deep in the interpreter.
struct CallSite {
  /// The method called; its schema types the arguments.
  const torch::jit::Function* callee = nullptr;
  /// The type the caller expects back; null where the callee's return type is all there is.
  c10::TypePtr output;
  /// How errors name the module, e.g. "submodule `fc` (Linear) of Net"; empty: "module Net".
  std::string name;
  /// Whether a pre-hook must return exactly the callee's argument count (call sites pass every
  /// argument; a top-level call may leave defaults out).
  bool exact_arity = false;
};

/// How a call of a TorchScript module shows itself to the hook sequence (see `CallImpl`): its
/// args and output are IValues already; replacements are checked against the call site's types.
struct JitCall {
  const HookArgs& args() const noexcept { return values; }
  void replace_args(HookArgs&& replaced) { values = std::move(replaced); }
  void accept_args() const;
  void forward() { returned.replace((*invoke)(values)); }
  const HookArgs& forward_args() const noexcept { return values; }
  ShownValue& output() noexcept { return returned; }
  void accept_output() const;
  void snapshot_lists(CallSnapshots<torch::jit::Module>& fresh) const;
  std::shared_ptr<torch::jit::Module> keep_alive() const {
    // The backward hooks run after this call is gone: they get a handle of their own.
    return std::make_shared<torch::jit::Module>(*module);
  }
  void wire_inputs(BackwardHookBase& hook);
  void wire_output(BackwardHookBase& hook);

  const torch::jit::Module* module;
  const CallSite* site;
  const std::function<c10::IValue(std::vector<c10::IValue>&)>* invoke = nullptr;  // `run` only
  HookArgs values;      // as the method receives them
  ShownValue returned;  // what the method returned; None until it did
};

/// The hook side of one call of a TorchScript module, whole (`run`) or in the two halves that a
/// call site rewritten as `modhooks::enter` / `modhooks::exit` runs apart. The hook lists are
/// snapshotted when it is made (the forward hooks and the always-call hooks are read again where
/// they changed, see `CallImpl`).
class HookedCall : public torch::CustomClassHolder {
 public:
  /// `hooks` are the module's own tables (may be null); global hooks are added.
  HookedCall(torch::jit::Module module, const std::shared_ptr<JitHooks>& hooks,
             std::shared_ptr<const CallSite> site);
  /// A call entered and never left: the module raised between `enter` and `exit`, and the
  /// interpreter lets go of the token as the error unwinds its frame. The always-call hooks run
  /// here, as they would where the call site runs the module itself (`modhooks::call_module`):
  /// a pre-hook or the module may have registered one since the call site was rewritten.
  ~HookedCall() override;
  HookedCall(const HookedCall&) = delete;
  HookedCall& operator=(const HookedCall&) = delete;
  bool empty() const { return sequence_.empty(); }

  /// Runs `invoke` (the module's method) on `args` inside the hooks; returns its output.
  c10::IValue run(std::vector<c10::IValue> args,
                  const std::function<c10::IValue(std::vector<c10::IValue>&)>& invoke);
  /// Pre-hooks (their replacements checked) and the input side of the backward wiring; `args`
  /// become what the method must receive. Runs the always-call hooks if it throws.
  void enter(std::vector<c10::IValue>& args);
  /// Forward hooks (their replacement checked) and the output side of the backward wiring.
  /// Runs the always-call hooks if it throws.
  void exit(c10::IValue& output);
  /// Forward raised after `enter`: the always-call hooks, with the output None.
  void failed() noexcept;

 private:
  torch::jit::Module module_;
  std::shared_ptr<const CallSite> site_;
  CallSnapshots<torch::jit::Module> snapshots_;
  CallImpl<torch::jit::Module> sequence_;
  JitCall call_;
  bool open_ = false;  // entered, not left yet
};

/// Runs `invoke` (the module's method) with the module's hooks around it: Python's `_call_impl`
/// for TorchScript modules. `hooks` are the module's own tables (may be null).
c10::IValue run_with_hooks(torch::jit::Module& module, const std::shared_ptr<JitHooks>& hooks,
                           std::vector<c10::IValue> inputs, std::shared_ptr<const CallSite> site,
                           const std::function<c10::IValue(std::vector<c10::IValue>&)>& invoke);

/// Remembers the `modhooks::Error` an inner call site raised. The interpreter rethrows every
/// error as one of its own (`c10::Error`; `std::runtime_error` in libtorch 1.13), with the
/// TorchScript traceback; `call` hands the caller the original back.
void remember_inner_error(std::exception_ptr error) noexcept;

/// The remembered error when `seen` is the interpreter's wrapping of it, else null; forgets it.
std::exception_ptr take_inner_error(const std::exception& seen) noexcept;

/// The hooks of the module object `object`, or null.
std::shared_ptr<JitHooks> find_hooks(const c10::ivalue::Object* object);

}  // namespace detail
MODHOOKS_END_NAMESPACE
