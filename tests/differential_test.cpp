// SPDX-License-Identifier: BSD-3-Clause
// Differential test against Python torch (tests/python/oracle_hooks.py): the same model, weights
// and inputs run in both; hook order, hook arguments and gradients must agree.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "nets.h"

namespace {

using modhooks::ScopedHandle;
using modhooks::TensorList;
using nlohmann::json;

at::Tensor from_json(const json& value) {
  if (value.is_number()) return at::scalar_tensor(value.get<double>(), at::kDouble);
  std::vector<at::Tensor> rows;
  for (const auto& row : value) rows.push_back(from_json(row));
  return at::stack(rows);
}

struct Call {
  std::string hook;
  TensorList grad_input, grad_output;
};

void expect_same(const json& expected, const TensorList& actual, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (expected[i].is_null()) {
      EXPECT_FALSE(actual[i].defined()) << what << "[" << i << "] should be None";
    } else {
      ASSERT_TRUE(actual[i].defined()) << what << "[" << i << "] should be a tensor";
      EXPECT_TRUE(at::allclose(actual[i].to(at::kDouble), from_json(expected[i]), 1e-5, 1e-6))
          << what << "[" << i << "]";
    }
  }
}

TEST(Differential, BackwardHooksMatchPython) {
  std::ifstream file(std::string(MODHOOKS_FIXTURES) + "/hooks_oracle.json");
  ASSERT_TRUE(file) << "run the python_oracle test first";
  const json oracle = json::parse(file);

  torch::nn::Linear a(4, 4), c(4, 4);
  testnets::TwoOut b;
  {
    at::NoGradGuard no_grad;
    a->weight.copy_(from_json(oracle["weights"]["A.weight"]));
    a->bias.copy_(from_json(oracle["weights"]["A.bias"]));
    c->weight.copy_(from_json(oracle["weights"]["C.weight"]));
    c->bias.copy_(from_json(oracle["weights"]["C.bias"]));
  }
  auto x = from_json(oracle["x"]).to(at::kFloat).requires_grad_();
  auto constant = from_json(oracle["constant"]).to(at::kFloat);
  auto name = [&](torch::nn::Module& m) -> std::string {
    return &m == a.get() ? "A" : &m == b.get() ? "B" : "C";
  };
  std::vector<Call> calls;
  std::vector<ScopedHandle> handles;
  handles.emplace_back(modhooks::register_module_full_backward_pre_hook(
      [&](torch::nn::Module& m, const TensorList& go) {
        calls.push_back({"global_pre:" + name(m), {}, go});
      }));
  handles.emplace_back(modhooks::register_module_full_backward_hook(
      [&](torch::nn::Module& m, const TensorList& gi, const TensorList& go) {
        calls.push_back({"global_full:" + name(m), gi, go});
      }));
  handles.emplace_back(modhooks::register_full_backward_hook(
      a, [&](torch::nn::Module& m, const TensorList& gi, const TensorList& go) {
        calls.push_back({"full:" + name(m), gi, go});
        TensorList halved;
        for (const auto& g : gi) halved.push_back(g * 0.5);
        return halved;
      }));
  handles.emplace_back(
      modhooks::register_full_backward_pre_hook(b, [&](torch::nn::Module& m, const TensorList& go) {
        calls.push_back({"pre:" + name(m), {}, go});
        return TensorList{at::zeros_like(go[0]), go[1]};
      }));
  handles.emplace_back(modhooks::register_full_backward_hook(
      c, [&](torch::nn::Module& m, const TensorList& gi, const TensorList& go) {
        calls.push_back({"full:" + name(m), gi, go});
      }));
  handles.emplace_back(modhooks::register_forward_hook(
      a, [&](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) {
        calls.push_back({"forward:A", {}, {}});
      }));

  auto h = modhooks::call(a, x);
  auto [p, q] = modhooks::call(b, h, h * 2);
  auto r = modhooks::call(c, constant);
  (p.sum() + (q * q).sum() + (r * q).sum()).backward();

  const json& expected = oracle["calls"];
  std::vector<std::string> expected_order, actual_order;
  for (const auto& call : expected) expected_order.push_back(call["hook"]);
  for (const auto& call : calls) actual_order.push_back(call.hook);
  ASSERT_EQ(actual_order, expected_order);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (!expected[i].contains("grad_output")) continue;
    expect_same(expected[i]["grad_input"], calls[i].grad_input, calls[i].hook + " grad_input");
    expect_same(expected[i]["grad_output"], calls[i].grad_output, calls[i].hook + " grad_output");
  }
  const json& grads = oracle["grads"];
  expect_same(json::array({grads["x"]}), {x.grad()}, "x.grad");
  expect_same(json::array({grads["A.weight"], grads["A.bias"], grads["C.weight"], grads["C.bias"]}),
              {a->weight.grad(), a->bias.grad(), c->weight.grad(), c->bias.grad()},
              "parameter grads");
}

}  // namespace
