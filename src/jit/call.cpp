// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// A hooked call of a TorchScript module: `call` on a module, and the operators that the graph
// rewriting (instrument.cpp) puts at the call sites of hooked submodules, which fire the hooks
// when the model's code runs there:
//   - `modhooks::enter(self, args...) -> (token, args...)` and `modhooks::exit(token, output)`
//     around the call, which stays in the graph: the two halves of a `HookedCall`;
//   - `modhooks::call_module(self, args...)` in place of the call: runs the callee itself inside
//     `run_with_hooks`, so that the always-call hooks run when it raises.
#include "modhooks/jit/call.h"

#include <ATen/core/function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <atomic>
#include <cstddef>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "call_site_ops.h"
#include "hooked_call.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// Routes the top-level tensors among `values` through one side of `hook`, in place.
void wrap_values(BackwardHookBase& hook, std::vector<c10::IValue>& values, bool output_side) {
  TensorList tensors;
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].isTensor() && values[i].toTensor().defined()) {
      tensors.push_back(values[i].toTensor());
      positions.push_back(i);
    }
  }
  TensorList wrapped = output_side ? hook.setup_output(tensors, positions, values.size())
                                   : hook.setup_input(tensors, positions, values.size());
  for (std::size_t k = 0; k < positions.size(); ++k) values[positions[k]] = wrapped[k];
}

/// A Tensor output counts as a 1-tuple; any other non-tuple gets Python's warning, no hooks.
void wrap_script_output(BackwardHookBase& hook, c10::IValue& output) {
  if (output.isTensor()) {
    std::vector<c10::IValue> single{output};
    wrap_values(hook, single, /*output_side=*/true);
    output = single[0];
  } else if (output.isTuple()) {
    std::vector<c10::IValue> elements = output.toTupleRef().elements().vec();
    wrap_values(hook, elements, /*output_side=*/true);
    output = c10::ivalue::Tuple::create(std::move(elements));
  } else {
    TORCH_WARN(
        "For backward hooks to be called, module output should be a Tensor or a tuple of "
        "Tensors but received ",
        output.tagKind());
  }
}

/// Whether `value` fits where the graph has `type` (tensor shapes recorded by tracing aside).
bool fits(const c10::IValue& value, const c10::TypePtr& type) {
  return value.type()->isSubtypeOf(*c10::unshapedType(type));
}

std::string name_of(const CallSite& site, const torch::jit::Module& module) {
  return site.name.empty() ? "module " + python_class_name(module) : site.name;
}

[[noreturn]] void fail_replacement(const CallSite& site, const torch::jit::Module& module,
                                   const char* hook, const std::string& what,
                                   const c10::IValue& value, const c10::TypePtr& expected) {
  fail<TypeError>("jit.hook.bad_replacement",
                  "modhooks: a " + std::string(hook) + " of " + name_of(site, module) +
                      " returned " + what + " of type " + value.type()->repr_str() +
                      ", but the call site expects " + c10::unshapedType(expected)->repr_str());
}

void check_args(const CallSite& site, const torch::jit::Module& module,
                const std::vector<c10::IValue>& args) {
  const auto& params = site.callee->getSchema().arguments();  // params[0] is self
  const std::size_t n = params.empty() ? 0 : params.size() - 1;
  if (args.size() > n || (site.exact_arity && args.size() != n)) {
    fail<TypeError>("jit.hook.bad_argument_count",
                    "modhooks: a forward pre-hook of " + name_of(site, module) + " returned " +
                        std::to_string(args.size()) + " arguments, but its forward takes " +
                        std::to_string(n));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!fits(args[i], params[i + 1].type())) {
      fail_replacement(site, module, "forward pre-hook", "argument `" + params[i + 1].name() + "`",
                       args[i], params[i + 1].type());
    }
  }
}

void check_output(const CallSite& site, const torch::jit::Module& module,
                  const c10::IValue& output) {
  c10::TypePtr expected = site.output;
  if (!expected && site.callee->getSchema().returns().size() == 1) {
    expected = site.callee->getSchema().returns()[0].type();
  }
  if (expected && !fits(output, expected)) {
    fail_replacement(site, module, "forward hook", "an output", output, expected);
  }
}

}  // namespace

void JitCall::accept_args() const { check_args(*site, *module, values); }

void JitCall::accept_output() const { check_output(*site, *module, returned.get()); }

void JitCall::snapshot_lists(CallSnapshots<torch::jit::Module>& fresh) const {
  fresh.global.take(global_hooks_if_any<torch::jit::Module>(), /*guarded=*/false);
  const std::shared_ptr<JitHooks> hooks = find_hooks(*module);
  fresh.local.take(hooks.get(), /*guarded=*/false);
}

void JitCall::wire_inputs(BackwardHookBase& hook) {
  wrap_values(hook, values, /*output_side=*/false);
}

void JitCall::wire_output(BackwardHookBase& hook) { wrap_script_output(hook, returned.owned()); }

HookedCall::HookedCall(torch::jit::Module module, const std::shared_ptr<JitHooks>& hooks,
                       std::shared_ptr<const CallSite> site)
    : module_(std::move(module)),
      site_(std::move(site)),
      snapshots_(global_hooks_if_any<torch::jit::Module>(), hooks.get()),
      sequence_(snapshots_),
      call_{&module_, site_.get(), nullptr, {}, {}} {}

c10::IValue HookedCall::run(std::vector<c10::IValue> args,
                            const std::function<c10::IValue(std::vector<c10::IValue>&)>& invoke) {
  call_.values = std::move(args);
  call_.invoke = &invoke;
  sequence_.run(module_, call_);
  return std::move(call_.returned.owned());
}

HookedCall::~HookedCall() {
  if (open_) failed();
}

void HookedCall::enter(std::vector<c10::IValue>& args) {
  call_.values = std::move(args);
  sequence_.enter(module_, call_);
  // Forward hooks see the args as the method received them; they may be registered until it
  // returns, so the args are kept whatever hooks there are now.
  args = call_.values;
  open_ = true;
}

void HookedCall::exit(c10::IValue& output) {
  open_ = false;  // `exit` runs the always-call hooks itself where it throws
  call_.returned.replace(std::move(output));
  sequence_.exit(module_, call_);
  output = std::move(call_.returned.owned());
}

void HookedCall::failed() noexcept {
  open_ = false;
  sequence_.failed(module_, call_);
}

c10::IValue run_with_hooks(torch::jit::Module& module, const std::shared_ptr<JitHooks>& hooks,
                           std::vector<c10::IValue> inputs, std::shared_ptr<const CallSite> site,
                           const std::function<c10::IValue(std::vector<c10::IValue>&)>& invoke) {
  HookedCall call(module, hooks, std::move(site));
  if (call.empty()) return invoke(inputs);
  return call.run(std::move(inputs), invoke);
}

namespace {
thread_local std::exception_ptr inner_error;
}  // namespace

void remember_inner_error(std::exception_ptr error) noexcept { inner_error = std::move(error); }

std::exception_ptr take_inner_error(const std::exception& seen) noexcept {
  std::exception_ptr error = std::exchange(inner_error, nullptr);
  if (!error) return nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& original) {
    if (std::string(seen.what()).find(original.what()) != std::string::npos) return error;
  }
  return nullptr;
}

c10::IValue call_script_with_hooks(torch::jit::Module& module, std::vector<c10::IValue> inputs) {
  try {
    auto hooks = find_hooks(module);
    if (!hooks && !any_global_hooks<torch::jit::Module>()) return module.forward(std::move(inputs));
    CallSite site;  // named only when an error needs it
    site.callee = &module.get_method("forward").function();
    // Not owned: the call ends before `site` does.
    std::shared_ptr<const CallSite> unowned(std::shared_ptr<void>(), &site);
    return run_with_hooks(module, hooks, std::move(inputs), std::move(unowned),
                          [&](std::vector<c10::IValue>& args) { return module.forward(args); });
  } catch (const std::exception& e) {  // libtorch 1.13's interpreter rethrows std::runtime_error
    if (auto original = take_inner_error(e)) std::rethrow_exception(original);
    throw;
  }
}

// The call-site operators.

c10::Symbol call_module_symbol() {
  static const c10::Symbol symbol = c10::Symbol::fromQualString("modhooks::call_module");
  return symbol;
}
c10::Symbol enter_symbol() {
  static const c10::Symbol symbol = c10::Symbol::fromQualString("modhooks::enter");
  return symbol;
}
c10::Symbol exit_symbol() {
  static const c10::Symbol symbol = c10::Symbol::fromQualString("modhooks::exit");
  return symbol;
}
c10::Symbol site_attr() {
  static const c10::Symbol symbol = c10::Symbol::attr("modhooks_site");
  return symbol;
}

namespace {

using torch::jit::Function;
using torch::jit::Node;
using torch::jit::Stack;

std::string unqualified(const c10::ClassType& type) {
  return type.name() ? type.name()->name() : type.repr_str();
}

/// Rethrows the exception being handled, remembering it first when it is modhooks' own (see
/// `remember_inner_error`).
[[noreturn]] void rethrow_remembered() {
  try {
    throw;
  } catch (const Error&) {
    remember_inner_error(std::current_exception());
    throw;
  }
}

/// The operation of one `modhooks::call_module` node: the callee is resolved once, when the
/// interpreter builds its code; each run looks up the hooks of the object it is handed.
torch::jit::Operation make_call_module(const Node* node) {
  const auto type = node->input(0)->type()->expect<c10::ClassType>();
  Function* callee = &type->getMethod(node->s(c10::attr::name));
  auto site = std::make_shared<CallSite>();
  site->callee = callee;
  site->output = node->output()->type();
  site->name = describe_call_site(node, *type);
  site->exact_arity = true;
  const std::size_t n = node->inputs().size();  // emitted as OP: the count is not on the stack
  return torch::jit::Operation([n, callee, site](Stack& stack) {
    if (call_hooks_active.load(std::memory_order_relaxed) != 0) {
      const c10::IValue& self = torch::jit::peek(stack, 0, n);
      auto hooks = find_hooks(&self.toObjectRef());
      if (hooks || any_global_hooks<torch::jit::Module>()) {
        torch::jit::Module module(self.toObject());
        std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - (n - 1)),
                                      std::make_move_iterator(stack.end()));
        torch::jit::drop(stack, n);
        auto invoke = [&](std::vector<c10::IValue>& a) {
          Stack inputs;
          inputs.reserve(a.size() + 1);
          inputs.push_back(module._ivalue());
          inputs.insert(inputs.end(), a.begin(), a.end());
          callee->run(inputs);
          return std::move(inputs.back());
        };
        try {
          stack.push_back(run_with_hooks(module, hooks, std::move(args), site, invoke));
        } catch (...) {
          rethrow_remembered();
        }
        return;
      }
    }
    Stack inputs(std::make_move_iterator(stack.end() - n), std::make_move_iterator(stack.end()));
    torch::jit::drop(stack, n);
    callee->run(inputs);
    stack.push_back(std::move(inputs.back()));
  });
}

/// `modhooks::enter(self, args...) -> (token, args...)`: the first half of a hooked call. The
/// token is the call's hook side in a capsule (None without hooks); it lives in the
/// interpreter's registers, so a call that raises before its `exit` frees it as it unwinds.
torch::jit::Operation make_enter(const Node* node) {
  const auto type = node->input(0)->type()->expect<c10::ClassType>();
  auto site = std::make_shared<CallSite>();
  site->callee = &type->getMethod(node->s(c10::attr::name));
  site->name = node->s(site_attr());
  site->exact_arity = true;
  const std::size_t n = node->inputs().size();
  return torch::jit::Operation([n, site](Stack& stack) {
    c10::IValue& self = torch::jit::peek(stack, 0, n);
    if (call_hooks_active.load(std::memory_order_relaxed) != 0) {
      auto hooks = find_hooks(&self.toObjectRef());
      if (hooks || any_global_hooks<torch::jit::Module>()) {
        auto call = c10::make_intrusive<HookedCall>(torch::jit::Module(self.toObject()),
                                                    std::move(hooks), site);
        if (!call->empty()) {
          std::vector<c10::IValue> args(stack.end() - (n - 1), stack.end());
          try {
            call->enter(args);
          } catch (...) {
            rethrow_remembered();
          }
          std::move(args.begin(), args.end(), stack.end() - (n - 1));
          self = c10::IValue::make_capsule(std::move(call));
          return;
        }
      }
    }
    self = c10::IValue();
  });
}

/// `modhooks::exit(token, output) -> output`: the second half.
torch::jit::Operation make_exit(const Node*) {
  return torch::jit::Operation([](Stack& stack) {
    const c10::IValue token = std::move(torch::jit::peek(stack, 0, 2));
    stack.erase(stack.end() - 2);
    if (token.isNone()) return;
    try {
      c10::static_intrusive_pointer_cast<HookedCall>(token.toCapsule())->exit(stack.back());
    } catch (...) {
      rethrow_remembered();
    }
  });
}

/// Registered in the unit that defines the operators' symbols, which the rewriting calls: a
/// static libmodhooks links this unit wherever it links the rewriting.
const torch::jit::RegisterOperators operators({
    torch::jit::Operator(call_module_symbol(), make_call_module,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator(enter_symbol(), make_enter, c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator(exit_symbol(), make_exit, c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace

std::string describe_call_site(const Node* node, const c10::ClassType& callee) {
  std::string path;
  const torch::jit::Value* value = node->input(0);
  while (value->node()->kind() == c10::prim::GetAttr) {
    const std::string& attr = value->node()->s(c10::attr::name);
    path = path.empty() ? attr : attr + "." + path;
    value = value->node()->input(0);
  }
  std::string owner;
  if (auto self = value->type()->cast<c10::ClassType>()) owner = " of " + unqualified(*self);
  return "submodule `" + path + "` (" + unqualified(callee) + ")" + owner;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
