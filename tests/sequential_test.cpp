// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/nn/sequential.h.
#include "modhooks/nn/sequential.h"

#include <gtest/gtest.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/sgd.h>

#include <string>
#include <vector>

#include "modhooks/nn/modules.h"
#include "modhooks/nn/utils.h"
#include "modhooks/register.h"
#include "modhooks/state/module_state.h"
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

TEST(Sequential, HolderCallRunsTheSequentialsOwnHooks) {
  modhooks::Sequential seq(torch::nn::Linear(4, 2));
  int fired = 0;
  auto handle = modhooks::register_forward_hook(
      seq, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++fired; });
  seq(at::randn({1, 4}));
  EXPECT_EQ(fired, 1);
}

std::vector<at::Tensor> parameters_of(const torch::nn::Module& module) {
  std::vector<at::Tensor> result;
  for (const auto& p : module.parameters()) result.push_back(p);
  return result;
}

TEST(Sequential, CloneCopiesWeightsIntoIndependentChildren) {
  modhooks::Sequential seq({{"fc1", torch::nn::Linear(4, 3)},
                            {"act", torch::nn::ReLU()},
                            {"fc2", modhooks::nn::Linear(3, 2)}});
  seq->eval();
  auto copy = std::dynamic_pointer_cast<modhooks::SequentialImpl>(seq->clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->named_parameters().keys(), seq->named_parameters().keys());
  EXPECT_FALSE(copy->is_training());
  auto mine = parameters_of(*seq), theirs = parameters_of(*copy);
  ASSERT_EQ(mine.size(), theirs.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(at::equal(mine[i], theirs[i])) << i;
    EXPECT_FALSE(mine[i].is_same(theirs[i])) << i;
  }
  auto x = at::randn({2, 4});
  EXPECT_TRUE(at::equal(copy->forward(x), seq->forward(x)));
  {
    at::NoGradGuard no_grad;
    seq->at<torch::nn::LinearImpl>(2).bias.add_(1);  // changes every output, whatever x is
  }
  EXPECT_FALSE(at::equal(copy->forward(x), seq->forward(x)));
  // The copy's children are new modules, and run through their own hooks.
  EXPECT_NE(copy->ptr(0).get(), seq->ptr(0).get());
  int fired = 0;
  auto handle = modhooks::register_forward_hook(
      copy->ptr(2), [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++fired; });
  copy->forward(x);
  seq->forward(x);
  EXPECT_EQ(fired, 1);
}

/// What `Cloneable::clone` of a parent does with a modhooks::Sequential member: it builds a new
/// parent and copies each child into the new one's.
struct ParentImpl : torch::nn::Cloneable<ParentImpl> {
  ParentImpl() { reset(); }
  void reset() override {
    seq = register_module("seq", modhooks::Sequential(torch::nn::Linear(3, 3)));
  }
  modhooks::Sequential seq{nullptr};
};

TEST(Sequential, CloneOfAParentKeepsTheWeights) {
  auto parent = std::make_shared<ParentImpl>();
  auto copy = std::dynamic_pointer_cast<ParentImpl>(parent->clone());
  auto mine = parameters_of(*parent), theirs = parameters_of(*copy);
  ASSERT_EQ(mine.size(), 2u);
  ASSERT_EQ(theirs.size(), 2u);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(at::equal(mine[i], theirs[i])) << i;
    EXPECT_FALSE(mine[i].is_same(theirs[i])) << i;
  }
  EXPECT_TRUE(at::equal(copy->seq->parameters()[0], theirs[0]));
}

TEST(Sequential, ChildrenWithDefaultArgumentsWorkAsInLibtorchs) {
  torch::nn::LSTM lstm(4, 5);
  modhooks::Sequential ours(lstm);
  torch::nn::Sequential theirs(lstm);
  using LstmOut = std::tuple<at::Tensor, std::tuple<at::Tensor, at::Tensor>>;
  std::size_t arity = 0;
  auto handle = modhooks::register_forward_pre_hook(
      lstm, [&](torch::nn::Module&, const IValues& args) { arity = args.size(); });
  auto x = at::randn({3, 2, 4});
  auto [y, state] = ours->forward<LstmOut>(x);
  EXPECT_EQ(arity, 2u) << "hooks see the hidden state filled in, as forward receives it";
  EXPECT_TRUE(at::equal(y, std::get<0>(theirs->forward<LstmOut>(x))));
  EXPECT_THROWS_WITH(ours->forward<LstmOut>(x, std::make_tuple(x, x), 1),
                     "expects at least 1 argument(s) and at most 2 argument(s), but received 3");

  torch::nn::MultiheadAttention attention(4, 2);
  modhooks::Sequential seq(attention);
  auto q = at::randn({3, 2, 4});
  auto [out, weights] = seq->forward<std::tuple<at::Tensor, at::Tensor>>(q, q, q);
  EXPECT_TRUE(at::equal(out, std::get<0>(attention->forward(q, q, q))));
  EXPECT_EQ(weights.sizes(), (std::vector<int64_t>{2, 3, 3}));
}

TEST(Sequential, MembersOfLibtorchsSequential) {
  modhooks::Sequential seq;
  EXPECT_TRUE(seq->is_empty());
  torch::nn::Linear a(2, 2);
  seq->push_back(a);                                              // libtorch holder
  seq->push_back("act", torch::nn::ReLUImpl());                   // module value, named
  seq->push_back(std::make_shared<torch::nn::LinearImpl>(2, 3));  // shared_ptr
  seq->push_back(modhooks::nn::Tanh());                           // modhooks holder
  std::vector<torch::nn::Linear> more{torch::nn::Linear(3, 2)};
  seq->extend(more);
  EXPECT_EQ(seq->size(), 5u);
  EXPECT_FALSE(seq->is_empty());
  EXPECT_EQ(seq->named_children().keys(), (std::vector<std::string>{"0", "act", "2", "3", "4"}));

  EXPECT_EQ(seq->ptr(0).get(), a.get());
  EXPECT_EQ(seq[0].get(), a.get());
  EXPECT_EQ(seq->ptr<torch::nn::LinearImpl>(0).get(), a.get());
  EXPECT_EQ(&seq->at<torch::nn::LinearImpl>(0), a.get());
  EXPECT_EQ(seq->at<torch::nn::LinearImpl>(2).options.out_features(), 3);
  EXPECT_THROWS_WITH(seq->at<torch::nn::LinearImpl>(1), "Attempted to cast module");
  EXPECT_THROWS_WITH(seq->ptr(5), "Index out of range");

  std::vector<torch::nn::Module*> iterated;
  for (auto& module : *seq) iterated.push_back(module.ptr().get());
  ASSERT_EQ(iterated.size(), 5u);
  EXPECT_EQ(iterated[0], a.get());
  EXPECT_EQ(iterated[4], more[0].get());

  seq->extend(*seq);  // the same children again, as libtorch's extend shares them
  EXPECT_EQ(seq->size(), 10u);
  EXPECT_EQ(seq->ptr(5).get(), a.get());
  std::vector<std::string> fired;
  std::vector<ScopedHandle> handles;
  for (std::size_t i : {0u, 4u}) {
    handles.emplace_back(modhooks::register_forward_hook(
        seq->ptr(i), [&, i](torch::nn::Module&, const IValues&, const c10::IValue&) {
          fired.push_back(std::to_string(i));
        }));
  }
  EXPECT_EQ(seq->forward(at::randn({1, 2})).sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(fired, (std::vector<std::string>{"0", "4", "0", "4"}));
}

/// A parametrization of a plain `torch::nn::Module`, which libtorch cannot clone.
struct PlainSymmetricImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x.triu() + x.triu(1).transpose(0, 1); }
};
TORCH_MODULE(PlainSymmetric);

/// A module of a user's, cloneable as libtorch's layers are, whose children get utilities.
struct PairImpl : torch::nn::Cloneable<PairImpl> {
  PairImpl() { reset(); }
  void reset() override {
    first = register_module("first", torch::nn::Linear(4, 4));
    second = register_module("second", torch::nn::Linear(4, 2));
  }
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(second, modhooks::call(first, x).tanh());
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};
TORCH_MODULE(Pair);

/// A model with every kind of utility, two nested in a module of a user's.
modhooks::Sequential with_utilities() {
  namespace nu = modhooks::nn::utils;
  torch::nn::Linear pruned(4, 4);
  nu::prune::l1_unstructured(pruned, "weight", 0.5);
  nu::prune::random_unstructured(pruned, "weight", 0.25);  // a pruning container
  return modhooks::Sequential(nu::weight_norm(torch::nn::Linear(3, 4)), torch::nn::Tanh(),
                              nu::spectral_norm(torch::nn::Linear(4, 4)), pruned, [] {
                                Pair pair;
                                nu::parametrizations::weight_norm(pair->first);
                                nu::parametrizations::spectral_norm(pair->second);
                                return pair;
                              }());
}

TEST(Sequential, CloneOfAModelWithUtilitiesIsPythonsDeepcopy) {
  // Python's copy.deepcopy: the same utilities with the same values, trained apart from the
  // original, whose tensors (an optimizer's, built before) stay the very same.
  auto seq = with_utilities();
  torch::optim::SGD before(seq->parameters(), torch::optim::SGDOptions(0.1));
  const std::vector<at::Tensor> parameters = seq->parameters();
  const modhooks::StateDict state = modhooks::state_dict(seq);
  const at::Tensor v_before = state.at("0.weight_v").clone();
  auto copy = std::dynamic_pointer_cast<modhooks::SequentialImpl>(seq->clone());
  ASSERT_TRUE(copy);

  ASSERT_EQ(seq->parameters().size(), parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(seq->parameters()[i].is_same(parameters[i])) << i;
  }
  const modhooks::StateDict copied = modhooks::state_dict(copy);
  ASSERT_EQ(copied.keys(), state.keys());
  for (const auto& [key, tensor] : state) {
    EXPECT_TRUE(at::equal(copied.at(key), tensor)) << key;
    EXPECT_FALSE(copied.at(key).is_same(tensor)) << key;
  }
  auto pair = copy->ptr<PairImpl>(4);
  ASSERT_TRUE(pair);
  EXPECT_TRUE(modhooks::nn::utils::parametrize::is_parametrized(pair->first, "weight"));
  EXPECT_TRUE(modhooks::nn::utils::parametrize::is_parametrized(pair->second, "weight"));

  // One step each, the same data: the same numbers, the original's through its old optimizer.
  const at::Tensor x = at::randn({5, 3});
  torch::optim::SGD after(copy->parameters(), torch::optim::SGDOptions(0.1));
  before.zero_grad();
  modhooks::call(seq, x).pow(2).sum().backward();
  before.step();
  after.zero_grad();
  modhooks::call(copy, x).pow(2).sum().backward();
  after.step();
  const modhooks::StateDict trained = modhooks::state_dict(seq);
  const modhooks::StateDict trained_copy = modhooks::state_dict(copy);
  for (const auto& [key, tensor] : trained) {
    EXPECT_TRUE(at::equal(trained_copy.at(key), tensor)) << key;
  }
  EXPECT_FALSE(at::equal(trained.at("0.weight_v"), v_before));  // it trained
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(modhooks::call(copy, x), modhooks::call(seq, x)));
}

TEST(Sequential, CloneOfAParametrizationLibtorchCannotCopyIsRefused) {
  // A parametrization whose class is not Cloneable: a precise error, the original as it was.
  namespace parametrize = modhooks::nn::utils::parametrize;
  torch::nn::Linear layer(4, 4);
  parametrize::register_parametrization(layer, "weight", PlainSymmetric());
  modhooks::Sequential seq(layer);
  const std::vector<std::string> keys = modhooks::state_dict(seq).keys();
  const std::vector<at::Tensor> parameters = seq->parameters();
  EXPECT_ERROR(seq->clone(), TypeError, "nn.utils.clone.parametrization");
  EXPECT_EQ(modhooks::state_dict(seq).keys(), keys);
  ASSERT_EQ(seq->parameters().size(), parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(seq->parameters()[i].is_same(parameters[i])) << i;
  }
  EXPECT_TRUE(parametrize::is_parametrized(layer, "weight"));
  const at::Tensor x = at::randn({2, 4});
  EXPECT_EQ(modhooks::call(seq, x).sizes(), (std::vector<std::int64_t>{2, 4}));
}

}  // namespace
