// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/jit/instrument.h: hooks on the inner submodules of TorchScript
// models that Python scripted, traced and froze (tests/python/oracle_jit_inner.py), compared
// with Python's eager hooks on the same model with the same weights.
#include "modhooks/jit/instrument.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "modhooks/modhooks.h"
#include "test_util.h"

namespace {

using modhooks::ScopedHandle;
using modhooks::TensorList;
using nlohmann::json;
using Args = std::vector<c10::IValue>;

std::string fixture(const std::string& name) { return std::string(MODHOOKS_FIXTURES) + "/" + name; }

at::Tensor from_json(const json& value) {
  if (value.is_number()) return at::scalar_tensor(value.get<double>(), at::kDouble);
  std::vector<at::Tensor> rows;
  for (const auto& row : value) rows.push_back(from_json(row));
  return at::stack(rows);
}

::testing::AssertionResult close(const at::Tensor& actual, const json& expected) {
  const at::Tensor want = from_json(expected);
  if (at::allclose(actual.detach().to(at::kDouble), want, 1e-5, 1e-6)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << actual << "\nexpected\n" << want;
}

json oracle() {
  std::ifstream file(fixture("jit_inner_oracle.json"));
  EXPECT_TRUE(file) << "run the python_oracle test first";
  return json::parse(file);
}

struct Event {
  std::string name;
  std::vector<at::Tensor> tensors;
};

class InnerHooks : public ::testing::TestWithParam<std::string> {
 protected:
  /// One forward and backward of the MatchPythonEager scenario, checked against Python.
  void check_run(std::vector<Event>& events, const json& want);
  void SetUp() override {
    expected = oracle();
    model = torch::jit::load(fixture("inner_" + GetParam() + ".pt"));
    x = from_json(expected["x"]).to(at::kFloat);
  }
  /// A forward hook on the submodule at `path` that counts its calls in `calls`.
  ScopedHandle count_forwards(const std::string& path, int& calls) {
    return ScopedHandle(modhooks::register_forward_hook(
        modhooks::submodule(model, path),
        [&calls](torch::jit::Module&, const Args&, const c10::IValue&) { ++calls; }));
  }
  json expected;
  torch::jit::Module model;
  at::Tensor x;
};

/// The methods each module type of `model` has now.
std::vector<const torch::jit::Function*> methods_of(const torch::jit::Module& model) {
  std::vector<const torch::jit::Function*> out;
  for (const auto& m : model.modules()) {
    for (const auto* f : m.type()->methods()) out.push_back(f);
  }
  return out;
}

TEST_P(InnerHooks, MatchPythonEager) {
  const json& want = expected["hooks"];
  // Run first: the registration must reach past the plans the executor already optimized.
  for (int i = 0; i < 3; ++i) model.forward({x});
  std::vector<Event> events;
  auto block0 = modhooks::submodule(model, "block.0");
  auto block1_fc = modhooks::submodule(model, "block.1.fc");
  auto head = modhooks::submodule(model, "head");
  std::vector<ScopedHandle> handles;
  handles.emplace_back(
      modhooks::register_forward_pre_hook(block0, [&](torch::jit::Module&, const Args& args) {
        events.push_back({"pre block.0", {args[0].toTensor()}});
      }));
  handles.emplace_back(modhooks::register_forward_hook(
      block0, [&](torch::jit::Module&, const Args&, const c10::IValue& out) {
        events.push_back({"forward block.0", {out.toTensor()}});
      }));
  handles.emplace_back(modhooks::register_forward_hook(
      block1_fc, [&](torch::jit::Module&, const Args&, const c10::IValue& out) {
        events.push_back({"forward block.1.fc", {out.toTensor()}});
        return c10::IValue(out.toTensor() + 1);
      }));
  handles.emplace_back(modhooks::register_full_backward_pre_hook(
      block0, [&](torch::jit::Module&, const TensorList& grad_output) {
        events.push_back({"backward_pre block.0", {grad_output[0]}});
        return TensorList{grad_output[0] * 2};
      }));
  handles.emplace_back(modhooks::register_full_backward_hook(
      block0, [&](torch::jit::Module&, const TensorList& gi, const TensorList& go) {
        events.push_back({"backward block.0", {gi[0], go[0]}});
      }));
  handles.emplace_back(modhooks::register_full_backward_hook(
      head, [&](torch::jit::Module&, const TensorList& gi, const TensorList& go) {
        events.push_back({"backward head", {gi[0], go[0]}});
      }));

  // Several runs: the first after the registration profiles, later ones run the optimized plan
  // (with differentiable graphs around the hooked calls); each must match.
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    events.clear();
    for (const auto& p : model.parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    check_run(events, want);
  }
}

TEST_P(InnerHooks, BackwardHooksSeeUndefinedWherePythonHasNone) {
  // No input requires grad: Python's grad_input is (None,) and its full hook fires at output
  // time.
  std::vector<bool> defined;
  ScopedHandle h(modhooks::register_full_backward_hook(
      modhooks::submodule(model, "block.0"),
      [&](torch::jit::Module&, const TensorList& gi, const TensorList& go) {
        defined = {gi[0].defined(), go[0].defined()};
      }));
  for (int run = 0; run < 3; ++run) {
    defined.clear();
    model.forward({x}).toTensor().sum().backward();
    EXPECT_EQ(defined, (std::vector<bool>{false, true})) << "run " << run;
  }
}

void InnerHooks::check_run(std::vector<Event>& events, const json& want) {
  auto input = x.clone().requires_grad_();
  auto out = model.forward({input}).toTensor();
  out.sum().backward();

  ASSERT_EQ(events.size(), want["events"].size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& expected_event = want["events"][i];
    EXPECT_EQ(events[i].name, expected_event[0].get<std::string>());
    ASSERT_EQ(events[i].tensors.size() + 1, expected_event.size()) << events[i].name;
    for (std::size_t k = 0; k < events[i].tensors.size(); ++k) {
      EXPECT_TRUE(close(events[i].tensors[k], expected_event[k + 1])) << events[i].name;
    }
  }
  EXPECT_TRUE(close(out, want["output"]));
  EXPECT_TRUE(close(input.grad(), want["x_grad"]));
  const auto weight = modhooks::submodule(model, "block.0.fc").attr("weight").toTensor();
  EXPECT_TRUE(close(weight.grad(), want["block0_weight_grad"]));
}

TEST_P(InnerHooks, FireThroughEveryEntryPoint) {
  int calls = 0;
  ScopedHandle h = count_forwards("block.1", calls);
  model.forward({x});
  model.get_method("forward")({x});
  modhooks::call(model, {x});
  EXPECT_EQ(calls, 3);
}

TEST_P(InnerHooks, PerInstance) {
  std::vector<std::string> fired;
  ScopedHandle h(modhooks::register_forward_pre_hook(
      modhooks::submodule(model, "block.1"),
      [&](torch::jit::Module&, const Args&) { fired.push_back("block.1"); }));
  model.forward({x});
  EXPECT_EQ(fired, std::vector<std::string>{"block.1"});
}

TEST_P(InnerHooks, RemovingTheLastHookRestoresTheOriginalMethods) {
  const auto before = methods_of(model);
  const auto plain = model.forward({x}).toTensor();
  auto handle =
      modhooks::register_forward_hook(modhooks::submodule(model, "block.0"),
                                      [](torch::jit::Module&, const Args&, const c10::IValue& out) {
                                        return c10::IValue(out.toTensor() * 0);
                                      });
  EXPECT_NE(methods_of(model), before);
  EXPECT_FALSE(at::allclose(model.forward({x}).toTensor(), plain));
  handle.remove();
  EXPECT_EQ(methods_of(model), before);
  EXPECT_TRUE(at::equal(model.forward({x}).toTensor(), plain));
  EXPECT_TRUE(close(plain, expected["plain_output"]));
}

TEST_P(InnerHooks, SavedAfterRemovalPythonLoadsAndRuns) {
  auto handle = modhooks::register_forward_pre_hook(modhooks::submodule(model, "head"),
                                                    [](torch::jit::Module&, const Args&) {});
  model.forward({x});
  handle.remove();
  const std::string path = fixture("inner_resaved_" + GetParam() + ".pt");
  model.save(path);
  const std::string command = std::string(MODHOOKS_PYTHON) +
                              " -c \"import json, torch, sys; m = torch.jit.load(sys.argv[1]); "
                              "o = json.load(open(sys.argv[2])); "
                              "y = m(torch.tensor(o['x'])); "
                              "sys.exit(0 if torch.allclose(y.double(), "
                              "torch.tensor(o['plain_output'], dtype=torch.double), 1e-5, 1e-6) "
                              "else 1)\" " +
                              path + " " + fixture("jit_inner_oracle.json");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

TEST_P(InnerHooks, UninstrumentAndInstrument) {
  int calls = 0;
  ScopedHandle h = count_forwards("head", calls);
  model.forward({x});
  EXPECT_EQ(calls, 1);
  modhooks::uninstrument(model);
  model.forward({x});
  EXPECT_EQ(calls, 1);
  modhooks::instrument(model);
  model.forward({x});
  EXPECT_EQ(calls, 2);
}

TEST_P(InnerHooks, WrongReplacementTypeNamesHookSubmoduleAndType) {
  ScopedHandle h(modhooks::register_forward_hook(
      modhooks::submodule(model, "block.1.fc"),
      [](torch::jit::Module&, const Args&, const c10::IValue&) { return c10::IValue(3); }));
  const std::string message = message_of([&] { modhooks::call(model, {x}); });
  EXPECT_NE(message.find("forward hook"), std::string::npos) << message;
  // Called directly, libtorch's interpreter rethrows it as its own error, text kept.
  EXPECT_THROWS_WITH(model.forward({x}), message);
  EXPECT_NE(message.find("fc` (Linear)"), std::string::npos) << message;
  EXPECT_NE(message.find("expects Tensor"), std::string::npos) << message;
}

TEST_P(InnerHooks, WrongPreHookArgumentType) {
  ScopedHandle h(modhooks::register_forward_pre_hook(
      modhooks::submodule(model, "head"),
      [](torch::jit::Module&, const Args&) { return Args{c10::IValue("text")}; }));
  const std::string message = message_of([&] { modhooks::call(model, {x}); });
  EXPECT_NE(message.find("`head`"), std::string::npos) << message;
  EXPECT_NE(message.find("expects Tensor"), std::string::npos) << message;
}

TEST_P(InnerHooks, GlobalHooksReachEveryInstrumentedCall) {
  modhooks::instrument(model);
  std::vector<std::string> jit_names;
  int nn_calls = 0;
  ScopedHandle jit_hook(modhooks::register_module_forward_hook(
      [&](torch::jit::Module& m, const Args&, const c10::IValue&) {
        jit_names.push_back(m.type()->name()->name());
      }));
  ScopedHandle nn_hook(modhooks::register_module_forward_hook(
      [&](torch::nn::Module&, const Args&, const c10::IValue&) { ++nn_calls; }));
  std::vector<std::string> generic_names;
  ScopedHandle generic_hook(modhooks::register_module_forward_pre_hook(
      [&](auto& m, const Args&) { generic_names.push_back(typeid(m).name()); }));
  modhooks::call(model, {x});
  EXPECT_EQ(jit_names, expected["global_forward_order"].get<std::vector<std::string>>());
  EXPECT_EQ(generic_names.size(), jit_names.size());
  EXPECT_EQ(nn_calls, 0);
  modhooks::uninstrument(model);
}

INSTANTIATE_TEST_SUITE_P(ScriptedAndTraced, InnerHooks, ::testing::Values("scripted", "traced"));

TEST(Submodule, PythonErrors) {
  auto model = torch::jit::load(fixture("inner_scripted.pt"));
  EXPECT_TRUE(modhooks::submodule(model, "")._ivalue() == model._ivalue());
  EXPECT_EQ(expect_error<modhooks::AttributeError>([&] { modhooks::submodule(model, "blokc"); },
                                                   "jit.submodule.no_attribute"),
            "Net has no attribute `blokc`");
  EXPECT_EQ(expect_error<modhooks::AttributeError>(
                [&] { modhooks::submodule(model, "head.weight"); }, "jit.submodule.not_a_module"),
            "`weight` is not an nn.Module");
}

TEST(Submodule, FrozenModelSaysWhy) {
  auto frozen = torch::jit::load(fixture("inner_frozen.pt"));
  const std::string message = expect_error<modhooks::AttributeError>(
      [&] { modhooks::submodule(frozen, "block.0"); }, "jit.submodule.no_attribute");
  EXPECT_NE(message.find("has no attribute `block`"), std::string::npos) << message;
  EXPECT_NE(message.find("frozen"), std::string::npos) << message;
}

TEST(Submodule, NnModules) {
  torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::ReLU());
  EXPECT_EQ(modhooks::submodule(net, "0").get(), net->ptr(0).get());
  EXPECT_EQ(modhooks::submodule(net, "").get(), net.ptr().get());
  EXPECT_EQ(expect_error<modhooks::AttributeError>([&] { modhooks::submodule(net, "2"); },
                                                   "nn.submodule.no_attribute"),
            "Sequential has no attribute `2`");
  EXPECT_EQ(expect_error<modhooks::AttributeError>([&] { modhooks::submodule(net, "0.bias"); },
                                                   "nn.submodule.not_a_module"),
            "`bias` is not an nn.Module");
}

TEST(AlwaysCall, RunsWhenTheInnerModuleThrows) {
  auto model = torch::jit::load(fixture("inner_raising.pt"));
  std::vector<std::string> fired;
  ScopedHandle plain(modhooks::register_forward_hook(
      modhooks::submodule(model, "inner"),
      [&](torch::jit::Module&, const Args&, const c10::IValue&) { fired.push_back("plain"); }));
  ScopedHandle always(modhooks::register_forward_hook(
      modhooks::submodule(model, "inner"),
      [&](torch::jit::Module&, const Args&, const c10::IValue& out) {
        fired.push_back(out.isNone() ? "always, output None" : "always");
      },
      modhooks::ForwardHookOptions().always_call(true)));
  EXPECT_THROWS_WITH(model.forward({at::full({2}, 1e6)}), "inner block refused its input");
  EXPECT_EQ(fired, std::vector<std::string>{"always, output None"});
  fired.clear();
  model.forward({at::ones({2})});
  EXPECT_EQ(fired, (std::vector<std::string>{"plain", "always"}));
}

TEST(AlwaysCall, ACallThatRaisesLeavesNothingBehind) {
  // Without always-call hooks the call site is split around the call (enter / exit); a raising
  // submodule never reaches its exit, and the next calls must pair up as before.
  auto model = torch::jit::load(fixture("inner_raising.pt"));
  std::vector<std::string> fired;
  ScopedHandle pre(modhooks::register_forward_pre_hook(
      modhooks::submodule(model, "inner"),
      [&](torch::jit::Module&, const Args&) { fired.push_back("pre"); }));
  ScopedHandle post(modhooks::register_forward_hook(
      modhooks::submodule(model, "inner"),
      [&](torch::jit::Module&, const Args&, const c10::IValue& out) {
        fired.push_back("forward");
        return c10::IValue(out.toTensor() * 10);
      }));
  for (int i = 0; i < 3; ++i) {
    EXPECT_THROWS_WITH(model.forward({at::full({2}, 1e6)}), "inner block refused its input");
  }
  EXPECT_EQ(fired, (std::vector<std::string>{"pre", "pre", "pre"}));
  fired.clear();
  EXPECT_TRUE(at::equal(model.forward({at::ones({2})}).toTensor(), at::full({2}, 21.0)));
  EXPECT_EQ(fired, (std::vector<std::string>{"pre", "forward"}));
}

TEST(Threads, RegistrationOnAnInstrumentedTypeWhileTheModelRuns) {
  // The rule of docs/hooks.md: once a type's call sites are rewritten (its first hook), more
  // hooks may come and go while other threads run the model.
  auto model = torch::jit::load(fixture("inner_scripted.pt"));
  auto block = modhooks::submodule(model, "block.1");
  std::atomic<int> calls{0};
  ScopedHandle first(modhooks::register_forward_pre_hook(
      block, [&](torch::jit::Module&, const Args&) { calls.fetch_add(1); }));
  const auto x = at::randn({3, 4});
  std::atomic<bool> stop{false};
  std::thread runner([&] {
    while (!stop.load()) model.forward({x});
  });
  int registrations = 0;
  while (calls.load() < 50) {
    modhooks::register_forward_pre_hook(block, [](torch::jit::Module&, const Args&) {}).remove();
    ++registrations;
  }
  stop.store(true);
  runner.join();
  EXPECT_GT(registrations, 0);
}

}  // namespace
