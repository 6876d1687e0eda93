// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Hooks on the inner submodules of TorchScript models. TorchScript calls a submodule through a
// `prim::CallMethod` node in its parent's method graph, so that is where modhooks reaches it.
// Each call site of a hooked module type is rewritten in one of two forms:
//   - `modhooks::enter` before the call and `modhooks::exit` after it, the call itself kept, so
//     that the executor still inlines the callee; the two halves of the hook side meet through a
//     token that `enter` passes to `exit` in the graph. A call that raises never reaches `exit`;
//   - `modhooks::call_module` in place of the call, an operator that runs the callee's method
//     itself, inside a try block: used once an always-call forward hook exists, since those must
//     run when the submodule raises.
// The methods of the compilation unit are swapped for fresh `GraphFunction`s over the rewritten
// graphs (fresh executors: the old ones cached optimized plans with the callees inlined); the
// original function objects are kept and put back, untouched, when the last hook goes. The
// operators themselves, which fire the hooks when the code runs, are in call.cpp, beside the call
// they fire.
#include "modhooks/jit/instrument.h"

#include <ATen/core/function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "call_site_ops.h"
#include "instrumentation.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

using torch::jit::Block;
using torch::jit::Function;
using torch::jit::GraphFunction;
using torch::jit::Node;

/// `forward`, or a traced forward that got a numeric suffix (`forward1`) because the type
/// already had one: the methods Python's `__call__` runs.
bool is_forward_name(const std::string& name) {
  static const std::string forward = "forward";
  return name.compare(0, forward.size(), forward) == 0 &&
         std::all_of(name.begin() + forward.size(), name.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
}

/// The module type a node calls the forward of, or null when it is no such call.
c10::ClassTypePtr called_module(const Node* node) {
  if (node->kind() != c10::prim::CallMethod || !is_forward_name(node->s(c10::attr::name))) {
    return nullptr;
  }
  auto type = node->input(0)->type()->cast<c10::ClassType>();
  return type && type->is_module() ? type : nullptr;
}

/// Calls `f` on every node of `block` and its sub-blocks; `f` may replace the node it is given.
template <class F>
void for_each_node(Block* block, F& f) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* node = *it++;
    for (Block* sub : node->blocks()) for_each_node(sub, f);
    f(node);
  }
}

/// `%y = prim::CallMethod(%sub, %args...)` becomes `%y = modhooks::call_module(%sub, %args...)`.
void replace_with_call_module(torch::jit::Graph& graph, Node* node) {
  torch::jit::WithInsertPoint guard(node);
  Node* call = graph.create(call_module_symbol(), node->inputs(), node->outputs().size());
  call->s_(c10::attr::name, node->s(c10::attr::name));
  graph.insertNode(call);
  for (std::size_t i = 0; i < node->outputs().size(); ++i) {
    call->output(i)->setType(node->output(i)->type());
    node->output(i)->replaceAllUsesWith(call->output(i));
  }
  node->destroy();
}

/// The call stays; `modhooks::enter` hands it the arguments the hooks leave, and
/// `modhooks::exit` the caller the output they leave:
///   %token, %a... = modhooks::enter(%sub, %args...)
///   %y0 = prim::CallMethod(%sub, %a...)
///   %y = modhooks::exit(%token, %y0)
void surround_with_enter_exit(torch::jit::Graph& graph, Node* node, const std::string& site) {
  const std::size_t n = node->inputs().size();
  Node* enter = graph.create(enter_symbol(), node->inputs(), n);
  enter->s_(c10::attr::name, node->s(c10::attr::name));
  enter->s_(site_attr(), site);
  enter->insertBefore(node);
  enter->output(0)->setType(c10::AnyType::get());
  for (std::size_t i = 1; i < n; ++i) {
    enter->output(i)->setType(node->input(i)->type());
    node->replaceInput(i, enter->output(i));
  }
  Node* exit = graph.create(exit_symbol(), {enter->output(0)}, 1);
  exit->insertAfter(node);
  exit->output()->setType(node->output()->type());
  node->output()->replaceAllUsesWith(exit->output());
  exit->addInput(node->output());
}

}  // namespace

/// The rewriting state of one compilation unit.
class Instrumentation {
 public:
  explicit Instrumentation(const std::shared_ptr<torch::jit::CompilationUnit>& cu)
      : cu_(cu), unit_(cu.get()) {
    discover(*cu);
  }

  bool serves(const torch::jit::CompilationUnit* unit) const {
    return unit == unit_ && !cu_.expired();
  }
  bool dead() const { return cu_.expired(); }

  /// Rewrites the call sites of `type` now (with those already hooked), before its first hook.
  void prepare(const c10::ClassType* type) {
    std::lock_guard<std::mutex> lock(mutex_);
    suspended_ = false;
    install(key(type));
  }

  /// A module of `type` gained or lost hooks: rewrites or restores when the count crosses zero.
  void count(const c10::ClassType* type, std::int64_t delta) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    std::int64_t& n = counts_[type];
    const bool crossed = (n == 0) != (n + delta == 0);
    n += delta;
    if (n == 0) counts_.erase(type);
    if (counts_.empty()) full_ = false;
    if (!crossed) return;
    try {
      install(key(nullptr));
    } catch (const std::exception& e) {
      TORCH_WARN("modhooks: could not rewrite the TorchScript code after a hook change: ",
                 e.what());
    }
  }

  /// `instrument(root)` (every call site) and `uninstrument(root)` (the original code).
  void set_all(bool all) {
    std::lock_guard<std::mutex> lock(mutex_);
    all_ = all;
    suspended_ = !all;
    install(key(nullptr));
  }

  /// An always-call forward hook arrived: call sites become `call_module`, which runs them when
  /// the submodule raises, until the unit has no hooks left.
  void require_full_calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    full_ = true;
    install(key(nullptr));
  }

  /// Installs again what the current state asks for (after `full_calls_everywhere`).
  void refresh() {
    std::lock_guard<std::mutex> lock(mutex_);
    install(key(nullptr));
  }

  bool calls(const c10::ClassType* type) const { return callees_.count(type) != 0; }

  /// Set, for the rest of the process, by the first global always-call hook for TorchScript.
  static inline std::atomic<bool> full_calls_everywhere{false};

 private:
  /// Which call sites are rewritten, and how; no types: the original code.
  struct Key {
    bool full = false;                         // `call_module` rather than `enter` / `exit`
    std::vector<const c10::ClassType*> types;  // sorted
    bool operator==(const Key& o) const { return full == o.full && types == o.types; }
    bool operator<(const Key& o) const { return full != o.full ? full < o.full : types < o.types; }
  };

  struct Class {
    c10::ClassTypePtr type;
    std::vector<Function*> methods;  // the originals, in the type's order
  };

  /// Every module class of the unit with its methods, and the types some call site calls.
  void discover(torch::jit::CompilationUnit& cu) {
    std::set<const c10::ClassType*> seen;
    for (Function* fn : cu.get_functions()) {
      auto* graph_fn = fn ? torch::jit::tryToGraphFunction(*fn) : nullptr;
      if (!graph_fn || graph_fn->graph()->inputs().empty()) continue;
      auto self = graph_fn->graph()->inputs()[0]->type()->cast<c10::ClassType>();
      if (!self || !self->is_module() || self->findMethod(fn->name()) != fn) continue;
      if (seen.insert(self.get()).second) classes_.push_back(Class{self, self->methods()});
      auto collect = [&](Node* node) {
        if (auto callee = called_module(node)) callees_.insert(callee.get());
      };
      for_each_node(graph_fn->graph()->block(), collect);
    }
  }

  /// The types whose call sites must be rewritten now, with `extra` about to be hooked.
  Key key(const c10::ClassType* extra) const {
    Key key;
    if (suspended_) return key;
    for (const c10::ClassType* type : callees_) {
      if (all_ || type == extra || counts_.count(type)) key.types.push_back(type);
    }
    key.full = !key.types.empty() && (full_ || full_calls_everywhere.load());
    return key;
  }

  void install(const Key& key) {
    if (key == installed_) return;
    if (key.types.empty()) {
      for (const Class& c : classes_) swap_methods(c, c.methods);
    } else {
      auto& version = versions_[key];
      if (version.empty()) version = build(key);
      std::size_t next = 0;
      for (const Class& c : classes_) {
        std::vector<Function*> methods;
        for (std::size_t i = 0; i < c.methods.size(); ++i) methods.push_back(version[next++].get());
        swap_methods(c, methods);
      }
    }
    installed_ = key;
  }

  static void swap_methods(const Class& c, const std::vector<Function*>& methods) {
    for (Function* m : c.methods) c.type->unsafeRemoveMethod(m->name());
    for (Function* m : methods) c.type->addMethod(m);
  }

  /// Fresh functions for every method of the unit, their graphs copied, and in them each call
  /// of a type in `key` replaced by `modhooks::call_module` with the same inputs and types.
  std::vector<std::unique_ptr<Function>> build(const Key& key) const {
    std::vector<std::unique_ptr<Function>> out;
    for (const Class& c : classes_) {
      for (Function* m : c.methods) {
        auto graph = torch::jit::toGraphFunction(*m).graph()->copy();
        auto rewrite = [&](Node* node) {
          auto callee = called_module(node);
          if (!callee || !std::binary_search(key.types.begin(), key.types.end(), callee.get())) {
            return;
          }
          if (key.full) {
            replace_with_call_module(*graph, node);
          } else {
            surround_with_enter_exit(*graph, node, describe_call_site(node, *callee));
          }
        };
        for_each_node(graph->block(), rewrite);
        auto fn = std::make_unique<GraphFunction>(m->qualname(), std::move(graph), nullptr);
        fn->setSchema(m->getSchema());
        out.push_back(std::move(fn));
      }
    }
    return out;
  }

  std::mutex mutex_;
  std::weak_ptr<torch::jit::CompilationUnit> cu_;
  const torch::jit::CompilationUnit* unit_;
  std::vector<Class> classes_;
  std::set<const c10::ClassType*> callees_;  // ordered: keys come out sorted
  std::map<const c10::ClassType*, std::int64_t> counts_;
  bool all_ = false;
  bool suspended_ = false;
  bool full_ = false;
  Key installed_;
  // Every rewritten version built, kept for the unit's lifetime: the interpreter of a running
  // call, or a `Method` a user holds, may still point into one that is no longer installed.
  std::map<Key, std::vector<std::unique_ptr<Function>>> versions_;
};

namespace {

/// Keeps the module's filter slot, and the count of hooks on its type that decides which call
/// sites stay rewritten.
class InnerHookObserver final : public FilterObserver {
 public:
  InnerHookObserver(const void* key, std::weak_ptr<Instrumentation> inst,
                    const c10::ClassType* type)
      : FilterObserver(key), inst_(std::move(inst)), type_(type) {}
  void hooks_changed(std::int64_t delta) noexcept override {
    FilterObserver::hooks_changed(delta);
    if (auto inst = inst_.lock()) inst->count(type_, delta);
  }

 private:
  std::weak_ptr<Instrumentation> inst_;
  const c10::ClassType* type_;
};

}  // namespace

namespace {
std::mutex units_mutex;
std::vector<std::shared_ptr<Instrumentation>> units;  // one per live compilation unit

std::vector<std::shared_ptr<Instrumentation>> live_units() {
  std::lock_guard<std::mutex> lock(units_mutex);
  units.erase(std::remove_if(units.begin(), units.end(), [](const auto& u) { return u->dead(); }),
              units.end());
  return units;
}
}  // namespace

std::shared_ptr<Instrumentation> instrumentation_for(const torch::jit::Module& module) {
  auto cu = module.type()->compilation_unit();
  for (const auto& unit : live_units()) {
    if (unit->serves(cu.get())) return unit;
  }
  std::lock_guard<std::mutex> lock(units_mutex);
  for (const auto& unit : units) {  // another thread may have made it meanwhile
    if (unit->serves(cu.get())) return unit;
  }
  units.push_back(std::make_shared<Instrumentation>(cu));
  return units.back();
}

void require_full_calls(const torch::jit::Module& module) {
  instrumentation_for(module)->require_full_calls();
}

void require_full_calls_everywhere() {
  if (Instrumentation::full_calls_everywhere.exchange(true)) return;
  for (const auto& unit : live_units()) unit->refresh();
}

void prepare_inner_hooks(Instrumentation& instrumentation, const torch::jit::Module& module) {
  if (instrumentation.calls(module.type().get())) instrumentation.prepare(module.type().get());
}

std::shared_ptr<HookObserver> inner_hook_observer(const std::shared_ptr<Instrumentation>& inst,
                                                  const torch::jit::Module& module) {
  return std::make_shared<InnerHookObserver>(module._ivalue().get(), inst, module.type().get());
}

}  // namespace detail

void instrument(const torch::jit::Module& root) {
  detail::instrumentation_for(root)->set_all(true);
}

void uninstrument(const torch::jit::Module& root) {
  detail::instrumentation_for(root)->set_all(false);
}

MODHOOKS_END_NAMESPACE
