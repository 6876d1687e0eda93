// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The operators that the graph rewriting (instrument.cpp) puts at the call sites of hooked
// submodules, and that fire the hooks when the model's code runs there:
//   - `modhooks::enter(self, args...) -> (token, args...)` and `modhooks::exit(token, output)`
//     around the call, which stays in the graph: the two halves of a `HookedCall`;
//   - `modhooks::call_module(self, args...)` in place of the call: runs the callee itself inside
//     `run_with_hooks`, so that the always-call hooks run when it raises.
// They sit beside the call they fire (call.cpp), not beside the rewriting.
#include "call_site_ops.h"

#include <ATen/core/function.h>
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

#include "hooked_call.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

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
