// SPDX-License-Identifier: BSD-3-Clause
// Differential test of the forward-hook call sequence: every combination of the global and the
// module's own forward pre-hooks, forward hooks (prepended or not) and always-call forward hooks,
// with replacements and failures (a pre-hook, the forward or a forward hook raising; always-call
// hooks raising on the error path), replayed on three kinds of module against Python's
// `Module._call_impl` (tests/python/oracle_call_sequence.py runs the scenarios and writes what
// each hook saw, the output or the error, and the warnings):
// - a torch::nn module, the child `target` of a parent whose forward runs it through
//   `modhooks::call`;
// - a TorchScript inner submodule: hooks on `target` of the scripted parent, fired where the
//   parent's forward calls it;
// - a point of a compiled program: `target` of the same parent exported with its inputs as a
//   point (`Point::has_inputs()`, so pre-hooks run and forward hooks see the args), in an
//   AOTInductor package or an ExecuTorch program.
// The nn and TorchScript cases build as call_sequence_test (the python_oracle fixture); the same
// file built with MODHOOKS_AOTI_PACKAGES defined is call_sequence_aoti_test, which reads the
// package and Python's answers that tests/python/aoti_packages.py writes (the aoti_packages
// fixture), and with MODHOOKS_EXECUTORCH_PROGRAMS call_sequence_executorch_test, which reads the
// program that tests/python/executorch_programs.py writes.
//
// A point has no forward of its own that could raise: in the scenarios where the target's
// forward raises, the point case makes a forward hook on the inner point `target.inner` raise
// while `target`'s point is open, as Python's outer module sees an exception from the module it
// calls (the oracle checks in Python that both ways give the same log). Pre-hook scenarios need
// a point with inputs: on a point without them no pre-hook runs and forward hooks see no args,
// which no Python module does, so those combinations are not replayed there.
//
// The scenarios at the end edit the hook lists while the call runs (a hook's `edits`, and
// `inner_edits` in a forward hook on `target.inner`, inside the target's forward: between the two
// halves of a point): the forward hooks are read after forward returns and the always-call hooks
// when the call fails, so what they register or remove takes effect in that same call.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/modhooks.h"
#include "test_util.h"

#if defined(MODHOOKS_AOTI_PACKAGES)
#include <cstdlib>

#include "modhooks/aoti.h"
#define MODHOOKS_POINT_CASE 1
#elif defined(MODHOOKS_EXECUTORCH_PROGRAMS)
#include "modhooks/executorch.h"
#define MODHOOKS_POINT_CASE 1
#endif

namespace {

using Args = std::vector<c10::IValue>;
using nlohmann::json;

/// The scenarios of oracle_call_sequence.py, in its order (ScenarioList checks both agree).
const char* const kScenarios[] = {
    "all_hooks",
    "own_hooks_only",
    "global_hooks_only",
    "pre_hook_replaces_args",
    "global_pre_hook_replaces_args",
    "every_pre_hook_replaces_args",
    "forward_hook_replaces_output",
    "global_forward_hook_replaces_output",
    "always_hook_replaces_output",
    "pre_and_forward_hooks_replace",
    "global_pre_hook_raises",
    "pre_hook_raises",
    "pre_hook_raises_after_replacement",
    "forward_raises",
    "forward_raises_after_replacement",
    "forward_raises_always_hooks_only",
    "forward_hook_raises",
    "forward_hook_raises_after_replacement",
    "global_forward_hook_raises",
    "prepended_always_hook_ran_before_forward_hook_raises",
    "always_hook_raises",
    "global_always_hook_raises",
    "always_hooks_raise_after_forward_raises",
    "always_hook_raises_after_pre_hook_raises",
    "always_hooks_replace_after_forward_raises",
    "pre_hook_registers_one_shot_forward_hook",
    "pre_hook_registers_prepended_forward_hook",
    "pre_hook_removes_forward_hook",
    "pre_hook_removes_global_forward_hook",
    "pre_hook_registers_global_forward_hook",
    "pre_hook_registers_pre_hook",
    "forward_registers_global_forward_hook",
    "forward_registers_forward_hook_reading_args",
    "forward_removes_forward_hooks",
    "no_hooks_when_called_then_forward_registers_some",
    "forward_hook_registers_forward_hook",
    "forward_raises_after_pre_hook_registers_always_hooks",
    "forward_raises_after_pre_hook_removes_always_hook",
    "forward_registers_always_hook_and_raises",
    "forward_hook_removes_started_always_hook_then_raises",
    "forward_hook_registers_always_hook_then_raises",
    "pre_hook_registers_always_hook_then_raises",
};

#if defined(MODHOOKS_AOTI_PACKAGES)
/// The packages' folder: MODHOOKS_AOTI_PACKAGES in the environment, else the one the build names
/// (as in aoti_test.cpp).
std::string package(const std::string& name) {
  const char* dir = std::getenv("MODHOOKS_AOTI_PACKAGES");
  return std::string(dir ? dir : MODHOOKS_AOTI_PACKAGES) + "/" + name;
}
using Net = modhooks::aoti::Model;
using Point = modhooks::aoti::Point;
const char* const kProgram = "call_sequence.pt2";
std::string oracle_path() { return package("call_sequence.oracle.json"); }
#elif defined(MODHOOKS_EXECUTORCH_PROGRAMS)
std::string package(const std::string& name) {
  return std::string(MODHOOKS_EXECUTORCH_PROGRAMS) + "/" + name;
}
using Net = modhooks::executorch::Program;
using Point = modhooks::executorch::Point;
const char* const kProgram = "call_sequence.pte";
std::string oracle_path() { return package("call_sequence.oracle.json"); }
#else
std::string fixture(const std::string& name) { return std::string(MODHOOKS_FIXTURES) + "/" + name; }
std::string oracle_path() { return fixture("call_sequence.json"); }
#endif

json oracle() {
  std::ifstream file(oracle_path());
  EXPECT_TRUE(file) << oracle_path() << ": run the Python oracle first";
  return file ? json::parse(file) : json::object();
}

/// One hook of a scenario, as the oracle registered it.
struct HookSpec {
  explicit HookSpec(const json& j)
      : id(j.at("id").get<std::string>()),
        kind(j.at("kind").get<std::string>()),
        action(j.at("action").is_null() ? "" : j.at("action").get<std::string>()),
        prepend(j.at("prepend").get<bool>()),
        always_call(j.at("always_call").get<bool>()),
        once(j.value("once", false)),
        edits(j.value("edits", json::array())) {}
  std::string id;
  std::string kind;    // "global_pre", "pre", "forward", "global_forward"
  std::string action;  // "", "replace", "raise"
  bool prepend;
  bool always_call;
  bool once;   // removes itself when it runs
  json edits;  // what it registers or removes when it runs, before its action
};

json sum_of(const c10::IValue& value) {
  if (value.isNone()) return json(nullptr);
  return json(value.toTensor().sum().item<double>());
}

json first_arg_sum(const Args& args) { return args.empty() ? json(nullptr) : sum_of(args[0]); }

/// What the hooks saw, and what they do: the oracle's `make_hook`.
/// `ran` is what the hook does besides (its edits of the lists).
struct Log {
  std::optional<Args> pre(const HookSpec& spec, const Args& args,
                          const std::function<void()>& ran) {
    events.push_back(json{{"hook", spec.id}, {"args", first_arg_sum(args)}});
    ran();
    if (spec.action == "raise") throw std::runtime_error(spec.id + " failed");
    if (spec.action == "replace") return Args{args.at(0).toTensor() * 2};
    return std::nullopt;
  }
  std::optional<c10::IValue> forward(const HookSpec& spec, const Args& args, const c10::IValue& out,
                                     const std::function<void()>& ran) {
    events.push_back(json{{"hook", spec.id}, {"args", first_arg_sum(args)}, {"out", sum_of(out)}});
    ran();
    if (spec.action == "raise") throw std::runtime_error(spec.id + " failed");
    if (spec.action == "replace") {
      return out.isNone() ? c10::IValue(args.at(0).toTensor() + 100)
                          : c10::IValue(out.toTensor() + 1);
    }
    return std::nullopt;
  }
  json events = json::array();
};

/// The hooks of one case by id, which hooks edit while the call runs (the oracle's `Registry`):
/// own ones on `target`, global ones for every module of the kind whose hooks take `Mod&`,
/// logging and acting only where `is_target`. Removes every hook, global ones included, however
/// the case ends.
template <class Mod, class Target>
class Registry {
 public:
  Registry(Target& target, std::function<bool(Mod&)> is_target, Log& log)
      : target_(target), is_target_(std::move(is_target)), log_(log) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry() {
    for (auto& h : extra_) h.remove();
    for (auto& [id, h] : handles_) h.remove();
  }

  /// Registers the scenario's hooks in its order.
  void add_all(const json& scenario) {
    for (const auto& j : scenario.at("hooks")) add(HookSpec(j));
  }
  /// A handle of a hook outside the scenario, removed with the others.
  void keep(modhooks::RemovableHandle h) { extra_.push_back(h); }

  /// Runs the oracle's edits: registrations and removals by id.
  void edit(const json& edits) {
    for (const auto& e : edits) {
      if (e.at("op") == "register") {
        add(HookSpec(e.at("hook")));
      } else {
        handles_.at(e.at("id").get<std::string>()).remove();
      }
    }
  }

 private:
  /// What a hook does when it runs, before its action: removes itself where it is a one-shot
  /// hook, and edits the lists.
  void ran(const HookSpec& spec) {
    if (spec.once) handles_.at(spec.id).remove();
    edit(spec.edits);
  }

  void add(const HookSpec& spec) {
    const modhooks::ForwardHookOptions options =
        modhooks::ForwardHookOptions().prepend(spec.prepend).always_call(spec.always_call);
    modhooks::RemovableHandle handle;
    if (spec.kind == "global_pre") {
      handle = modhooks::register_module_forward_pre_hook(
          [this, spec](Mod& m, const Args& args) -> std::optional<Args> {
            if (!is_target_(m)) return std::nullopt;
            return log_.pre(spec, args, [&] { ran(spec); });
          });
    } else if (spec.kind == "pre") {
      handle = modhooks::register_forward_pre_hook(
          target_,
          [this, spec](Mod&, const Args& args) -> std::optional<Args> {
            return log_.pre(spec, args, [&] { ran(spec); });
          },
          options);
    } else if (spec.kind == "forward") {
      handle = modhooks::register_forward_hook(
          target_,
          [this, spec](Mod&, const Args& args,
                       const c10::IValue& out) -> std::optional<c10::IValue> {
            return log_.forward(spec, args, out, [&] { ran(spec); });
          },
          options);
    } else {
      EXPECT_EQ(spec.kind, "global_forward");
      EXPECT_FALSE(spec.prepend) << "Python's global forward hooks have no prepend";
      handle = modhooks::register_module_forward_hook(
          [this, spec](Mod& m, const Args& args,
                       const c10::IValue& out) -> std::optional<c10::IValue> {
            if (!is_target_(m)) return std::nullopt;
            return log_.forward(spec, args, out, [&] { ran(spec); });
          },
          modhooks::ForwardHookOptions().always_call(spec.always_call));
    }
    handles_[spec.id] = handle;
  }

  Target& target_;
  std::function<bool(Mod&)> is_target_;
  Log& log_;
  std::map<std::string, modhooks::RemovableHandle> handles_;
  std::vector<modhooks::RemovableHandle> extra_;
};

/// Registers on `inner` the forward hook that runs the scenario's `inner_edits` (none where it
/// has none).
template <class Mod, class Target, class Inner>
void edit_in_forward(Registry<Mod, Target>& registry, Inner& inner, const json& edits) {
  if (edits.empty()) return;
  registry.keep(modhooks::register_forward_hook(
      inner, [&registry, edits](Mod&, const Args&, const c10::IValue&) { registry.edit(edits); }));
}

/// Runs the parent once and returns what happened in the oracle's form.
json outcome(const Log& log, const std::function<at::Tensor()>& run) {
  json output = nullptr;
  json error = nullptr;
  json warnings = json::array();
  {
    WarningCapture captured;
    try {
      const at::Tensor y = run().detach().to(at::kDouble).contiguous();
      output = std::vector<double>(y.data_ptr<double>(), y.data_ptr<double>() + y.numel());
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (const auto& message : captured.messages) {
      if (message.find("always_call=True") != std::string::npos) warnings.push_back(message);
    }
  }
  return json{{"events", log.events}, {"output", output}, {"error", error}, {"warnings", warnings}};
}

bool near(const json& got, const json& want) {
  if (got.is_null() || want.is_null()) return got.is_null() && want.is_null();
  if (!got.is_number() || !want.is_number()) return false;
  const double g = got.get<double>();
  const double w = want.get<double>();
  return std::abs(g - w) <= 1e-9 * (1.0 + std::abs(w));
}

/// Where `got` differs from Python's `want`; empty where they agree. Errors and warnings agree
/// when C++'s text contains Python's (TorchScript wraps an error in its own text).
std::string mismatch(const json& got, const json& want) {
  const json& ge = got.at("events");
  const json& we = want.at("events");
  if (ge.size() != we.size()) return "the hooks that ran differ";
  for (std::size_t i = 0; i < we.size(); ++i) {
    const std::string where = "event " + std::to_string(i) + ": ";
    if (ge[i].at("hook") != we[i].at("hook")) return where + "another hook ran";
    if (!near(ge[i].at("args"), we[i].at("args"))) return where + "the hook saw other args";
    if (ge[i].contains("out") != we[i].contains("out")) return where + "another kind of hook";
    if (we[i].contains("out") && !near(ge[i].at("out"), we[i].at("out"))) {
      return where + "the hook saw another output";
    }
  }
  if (want.at("error").is_null()) {
    if (!got.at("error").is_null()) return "C++ raised where Python returned";
    const json& go = got.at("output");
    const json& wo = want.at("output");
    if (go.size() != wo.size()) return "the outputs' sizes differ";
    for (std::size_t i = 0; i < wo.size(); ++i) {
      if (!near(go[i], wo[i])) return "output element " + std::to_string(i) + " differs";
    }
  } else {
    if (got.at("error").is_null()) return "C++ returned where Python raised";
    if (got.at("error").get<std::string>().find(want.at("error").get<std::string>()) ==
        std::string::npos) {
      return "another error propagated";
    }
  }
  const json& gw = got.at("warnings");
  const json& ww = want.at("warnings");
  if (gw.size() != ww.size()) return "the warnings differ in number";
  for (std::size_t i = 0; i < ww.size(); ++i) {
    if (gw[i].get<std::string>().find(ww[i].get<std::string>()) == std::string::npos) {
      return "warning " + std::to_string(i) + " differs";
    }
  }
  return "";
}

/// One line of a result: the hooks in order with what they saw, then the output or the error.
std::string describe(const json& result) {
  std::ostringstream s;
  for (const auto& e : result.at("events")) {
    s << e.at("hook").get<std::string>() << "(args " << e.at("args").dump();
    if (e.contains("out")) s << ", out " << e.at("out").dump();
    s << ") ";
  }
  if (result.at("error").is_null()) {
    s << "-> output " << result.at("output").dump();
  } else {
    s << "-> error " << result.at("error").dump();
  }
  s << ", warnings " << result.at("warnings").dump();
  return s.str();
}

class CallSequence : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    all = oracle();
    ASSERT_TRUE(all.contains("scenarios"));
    for (const auto& s : all.at("scenarios")) {
      if (s.at("name").get<std::string>() == GetParam()) scenario = s;
    }
    ASSERT_FALSE(scenario.is_null()) << GetParam() << " is not in " << oracle_path();
    const auto values = all.at("x").get<std::vector<double>>();
    x = torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble));
    message = all.at("message").get<std::string>();
    forward_raises = scenario.at("forward_raises").get<bool>();
    inner_edits = scenario.value("inner_edits", json::array());
  }
  /// Compares what C++ did with what Python did.
  void expect_python(const json& got) const {
    EXPECT_EQ(mismatch(got, scenario), "")
        << "\nC++:    " << describe(got) << "\nPython: " << describe(scenario);
  }
  json all;
  json scenario;
  at::Tensor x;
  std::string message;
  bool forward_raises = false;
  json inner_edits;  // what a forward hook on `target.inner` edits, inside the target's forward
};

TEST(ScenarioList, IsTheOracles) {
  const json all = oracle();
  ASSERT_TRUE(all.contains("scenarios"));
  std::vector<std::string> names;
  for (const auto& s : all.at("scenarios")) names.push_back(s.at("name").get<std::string>());
  EXPECT_EQ(names, std::vector<std::string>(std::begin(kScenarios), std::end(kScenarios)));
}

#ifndef MODHOOKS_POINT_CASE

/// oracle_call_sequence.py's Scale.
struct ScaleImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x * 3; }
};

/// oracle_call_sequence.py's Target: its forward raises while `fail` is set, after it called
/// `inner` through its hooks.
struct TargetImpl : torch::nn::Module {
  explicit TargetImpl(std::string text)
      : inner(register_module("inner", std::make_shared<ScaleImpl>())), message(std::move(text)) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = modhooks::call(inner, x);
    if (fail) throw std::runtime_error(message);
    return y + 0.5;
  }
  std::shared_ptr<ScaleImpl> inner;
  bool fail = false;
  std::string message;
};

/// oracle_call_sequence.py's Parent, running its target through its hooks.
struct ParentImpl : torch::nn::Module {
  explicit ParentImpl(std::string message)
      : target(register_module("target", std::make_shared<TargetImpl>(std::move(message)))) {}
  at::Tensor forward(const at::Tensor& x) { return modhooks::call(target, x) - 1; }
  std::shared_ptr<TargetImpl> target;
};

TEST_P(CallSequence, NnModule) {
  auto parent = std::make_shared<ParentImpl>(message);
  parent->target->fail = forward_raises;
  const torch::nn::Module* raw = parent->target.get();
  Log log;
  Registry<torch::nn::Module, std::shared_ptr<TargetImpl>> registry(
      parent->target, [raw](torch::nn::Module& m) { return &m == raw; }, log);
  edit_in_forward(registry, parent->target->inner, inner_edits);
  registry.add_all(scenario);
  if (HasFailure()) return;
  expect_python(outcome(log, [&] { return modhooks::call(parent, x); }));
}

TEST_P(CallSequence, TorchScriptInnerModule) {
  torch::jit::Module model = torch::jit::load(fixture("call_sequence_scripted.pt"));
  torch::jit::Module target = modhooks::submodule(model, "target");
  target.setattr("fail", forward_raises);  // the scripted Target raises while it is set
  // Global hooks reach inner call sites once they are rewritten: by a hook on a module of the
  // callee's type, or by `instrument` (a scenario with global hooks only has no such hook).
  modhooks::instrument(model);
  Log log;
  Registry<torch::jit::Module, torch::jit::Module> registry(
      target, [target](torch::jit::Module& m) { return m._ivalue() == target._ivalue(); }, log);
  torch::jit::Module inner = modhooks::submodule(model, "target.inner");
  edit_in_forward(registry, inner, inner_edits);
  registry.add_all(scenario);
  if (HasFailure()) return;
  expect_python(outcome(log, [&] { return model.forward(Args{x}).toTensor(); }));
}

#else  // MODHOOKS_POINT_CASE

TEST_P(CallSequence, Point) {
  Net net(package(kProgram));
  const Point& target = net.point("target");
  ASSERT_TRUE(target.has_inputs()) << "exported without its inputs: pre-hooks would not run";
  Log log;
  Registry<const Point, const Point> registry(
      target, [](const Point& p) { return p.name() == "target"; }, log);
  edit_in_forward(registry, net.point("target.inner"), inner_edits);
  if (forward_raises) {
    // The target's forward raising: what it calls raises while its point is open.
    registry.keep(modhooks::register_forward_hook(
        net.point("target.inner"), [text = message](const Point&, const Args&, const c10::IValue&) {
          throw std::runtime_error(text);
        }));
  }
  registry.add_all(scenario);
  if (HasFailure()) return;
  expect_python(outcome(log, [&] { return net.run({x}).at(0); }));
}

#endif  // MODHOOKS_POINT_CASE

INSTANTIATE_TEST_SUITE_P(Scenarios, CallSequence, ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
