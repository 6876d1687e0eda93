// Tests of include/modhooks/nn/sequential.h.
#include "modhooks/nn/sequential.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>

#include <string>
#include <vector>

#include "modhooks/nn/register.h"
#include "nets.h"
#include "test_util.h"

namespace {

using modhooks::ScopedHandle;
using IValues = std::vector<c10::IValue>;

TEST(Sequential, RunsChildrenThroughTheirHooks) {
  modhooks::Sequential seq(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
  std::vector<std::string> fired;
  std::vector<ScopedHandle> handles;
  for (std::size_t i = 0; i < seq->size(); ++i) {
    handles.emplace_back(modhooks::register_forward_hook(
        seq->ptr(i), [&, i](torch::nn::Module&, const IValues&, const c10::IValue&) {
          fired.push_back(std::to_string(i));
        }));
  }
  handles.emplace_back(modhooks::register_forward_hook(
      seq,
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) { fired.push_back("seq"); }));
  auto x = at::randn({5, 4});
  auto y = modhooks::call(seq, x);
  EXPECT_EQ(fired, (std::vector<std::string>{"0", "1", "2", "seq"}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, 2}));
}

TEST(Sequential, SameParameterNamesAndResultsAsLibtorchs) {
  torch::nn::Linear a(4, 3), b(3, 2);
  modhooks::Sequential ours(a, torch::nn::ReLU(), b);
  torch::nn::Sequential theirs(a, torch::nn::ReLU(), b);
  EXPECT_EQ(ours->named_parameters().keys(), theirs->named_parameters().keys());
  auto x = at::randn({2, 4});
  EXPECT_TRUE(at::equal(ours->forward(x), theirs->forward(x)));
}

TEST(Sequential, EmptyAndWrongReturnTypeAreErrors) {
  modhooks::Sequential empty;
  EXPECT_THROWS_WITH(empty->forward(at::randn({1})), "empty Sequential");
  modhooks::Sequential seq{torch::nn::ReLU()};
  EXPECT_THROWS_WITH(seq->forward<int>(at::randn({1})), "but you asked for type int");
}

}  // namespace
