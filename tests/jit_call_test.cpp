// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/jit/call.h and the TorchScript side of the registration and state
// functions, on modules Python torch scripted and saved (tests/python/oracle_jit.py), compared
// with what Python's ScriptModule did for the five hook APIs that work there.
#include "modhooks/jit/call.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "test_util.h"

namespace {

using modhooks::ScopedHandle;
using modhooks::StateDict;
using modhooks::TensorList;
using nlohmann::json;
using Strings = std::vector<std::string>;

at::Tensor from_json(const json& value) {
  if (value.is_number()) return at::scalar_tensor(value.get<double>(), at::kDouble);
  std::vector<at::Tensor> rows;
  for (const auto& row : value) rows.push_back(from_json(row));
  return at::stack(rows);
}

bool close(const at::Tensor& actual, const json& expected) {
  return at::allclose(actual.to(at::kDouble), from_json(expected), 1e-5, 1e-6);
}

class Jit : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::ifstream file(std::string(MODHOOKS_FIXTURES) + "/jit_oracle.json");
    ASSERT_TRUE(file) << "run the python_oracle test first";
    oracle = json::parse(file);
    module = torch::jit::load(std::string(MODHOOKS_FIXTURES) + "/" + GetParam() + ".pt");
    x = from_json(oracle["x"]).to(at::kFloat);
  }
  at::Tensor forward_sum(const at::Tensor& input) {
    return modhooks::call(module, {input}).toTensor().sum();
  }
  json oracle;
  torch::jit::Module module;
  at::Tensor x;
};

TEST_P(Jit, CallWithoutHooksIsForward) {
  EXPECT_TRUE(at::equal(modhooks::call(module, {x}).toTensor(), module.forward({x}).toTensor()));
}

TEST_P(Jit, BackwardPreHookRewritesGradOutputLikePython) {
  for (const char* scenario : {"zero_pre", "double_pre"}) {
    const double factor = std::string(scenario) == "zero_pre" ? 0.0 : 2.0;
    std::vector<int64_t> shape;
    ScopedHandle h(modhooks::register_full_backward_pre_hook(
        module, [&](torch::jit::Module&, const TensorList& grad_output) {
          shape = grad_output[0].sizes().vec();
          return TensorList{grad_output[0] * factor};
        }));
    auto input = x.clone().requires_grad_();
    forward_sum(input).backward();
    EXPECT_EQ(shape, oracle[scenario]["grad_output_shape"].get<std::vector<int64_t>>());
    EXPECT_TRUE(close(input.grad(), oracle[scenario]["x_grad"])) << scenario;
  }
}

TEST_P(Jit, FullBackwardHookWorksAndMatchesTheEagerModule) {
  // What Python's ScriptModule cannot do (pytorch #181473): the answer comes from Python's
  // eager twin with the same weights.
  const json& expected = oracle["full_hook"];
  int calls = 0;
  ScopedHandle h(modhooks::register_full_backward_hook(
      module,
      [&](torch::jit::Module& m, const TensorList& grad_input, const TensorList& grad_output) {
        ++calls;
        EXPECT_TRUE(m._ivalue() == module._ivalue());
        EXPECT_TRUE(close(grad_input[0], expected["grad_input"][0]));
        EXPECT_TRUE(close(grad_output[0], expected["grad_output"][0]));
        return TensorList{grad_input[0] * 3};
      }));
  auto input = x.clone().requires_grad_();
  forward_sum(input).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(close(input.grad(), expected["x_grad"]));
}

TEST_P(Jit, PrependOrderRemovalAndHandleIdentity) {
  std::vector<int> fired;
  auto first = modhooks::register_full_backward_pre_hook(
      module, [&](torch::jit::Module&, const TensorList&) { fired.push_back(0); });
  torch::jit::Module same_object = module;  // another handle to the same module
  ScopedHandle second(modhooks::register_full_backward_pre_hook(
      same_object, [&](torch::jit::Module&, const TensorList&) { fired.push_back(1); },
      /*prepend=*/true));
  forward_sum(x.clone().requires_grad_()).backward();
  EXPECT_EQ(fired, (std::vector<int>{1, 0}));
  first.remove();
  fired.clear();
  forward_sum(x.clone().requires_grad_()).backward();
  EXPECT_EQ(fired, (std::vector<int>{1}));
}

TEST_P(Jit, ForwardHooksSeeIValues) {
  std::vector<std::string> fired;
  ScopedHandle pre(modhooks::register_forward_pre_hook(
      module, [&](torch::jit::Module&, const std::vector<c10::IValue>& args) {
        fired.push_back("pre");
        return std::vector<c10::IValue>{args[0].toTensor() * 0};
      }));
  ScopedHandle post(modhooks::register_forward_hook(
      module, [&](torch::jit::Module&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        fired.push_back("forward");
        return c10::IValue(out.toTensor() + 1);
      }));
  auto out = modhooks::call(module, {x}).toTensor();
  EXPECT_EQ(fired, (Strings{"pre", "forward"}));
  EXPECT_TRUE(at::allclose(out, module.forward({x * 0}).toTensor() + 1));
}

TEST_P(Jit, StateDictMatchesPythonWithHookEventsAndPrefixes) {
  std::vector<json> events;
  ScopedHandle pre(modhooks::register_state_dict_pre_hook(
      module, [&](torch::jit::Module&, const std::string& prefix, bool) {
        events.push_back(json::array({"sd_pre", prefix}));
      }));
  ScopedHandle post(modhooks::register_state_dict_post_hook(
      module, [&](torch::jit::Module&, StateDict& sd, const std::string& prefix,
                  const modhooks::Metadata&) {
        events.push_back(json::array({"sd_post", prefix, sd.size()}));
      }));
  std::string child_prefix;
  ScopedHandle child(modhooks::register_state_dict_pre_hook(
      module.attr("fc").toModule(),
      [&](torch::jit::Module&, const std::string& prefix, bool) { child_prefix = prefix; }));
  auto sd = modhooks::state_dict(module);
  EXPECT_EQ(child_prefix, "fc.");
  EXPECT_EQ(json(events), json::array({oracle["events"][0], oracle["events"][1]}));
  Strings expected_keys;
  for (const auto& [key, value] : oracle["state_dict"].items()) expected_keys.push_back(key);
  std::sort(expected_keys.begin(), expected_keys.end());
  Strings keys = sd.keys();
  std::sort(keys.begin(), keys.end());
  ASSERT_EQ(keys, expected_keys);
  for (const auto& [key, value] : sd) EXPECT_TRUE(close(value, oracle["state_dict"][key])) << key;
}

TEST_P(Jit, LoadHooksRunPreLoadPostWhateverTheRegistrationOrder) {
  auto sd = modhooks::state_dict(module);
  std::vector<json> events;
  ScopedHandle post(modhooks::register_load_state_dict_post_hook(
      module, [&](torch::jit::Module& m, modhooks::IncompatibleKeys&) {
        const auto weight = m.attr("fc").toModule().attr("weight").toTensor();
        events.push_back(json::array({"load_post", weight.eq(0).all().item<bool>()}));
      }));
  ScopedHandle pre(modhooks::register_load_state_dict_pre_hook(
      module, [&](torch::jit::Module& m, StateDict& local, const std::string& prefix,
                  const modhooks::Metadata&, bool, Strings&, Strings&, Strings&) {
        EXPECT_TRUE(m._ivalue() == module._ivalue());
        events.push_back(json::array({"load_pre", prefix}));
        for (auto& [key, tensor] : local) tensor = at::zeros_like(tensor);
      }));
  modhooks::load_state_dict(module, sd);
  EXPECT_EQ(json(events), json::array({oracle["events"][2], oracle["events"][3]}));
}

TEST_P(Jit, FailedLoadChangesNothing) {
  auto before = modhooks::state_dict(module);
  std::vector<at::Tensor> saved;
  for (const auto& [key, t] : before) saved.push_back(t.clone());
  auto sd = modhooks::state_dict(module);
  for (auto& [key, t] : sd) t = at::zeros_like(t);
  sd.insert_or_assign("head.bias", at::zeros({7}));
  EXPECT_THROWS_WITH(modhooks::load_state_dict(module, sd),
                     "size mismatch for head.bias: copying a param with shape torch.Size([7])");
  std::size_t i = 0;
  for (const auto& [key, t] : modhooks::state_dict(module)) EXPECT_TRUE(at::equal(t, saved[i++]));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Jit, ::testing::Values("subclass", "scripted"),
                         [](const auto& info) { return info.param; });

}  // namespace
