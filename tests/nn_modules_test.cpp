// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/nn/modules.h and holder.h: hook-aware holders for torch::nn.
#include "modhooks/nn/modules.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "modhooks/nn/sequential.h"
#include "modhooks/register.h"
#include "test_util.h"

namespace {

using modhooks::ScopedHandle;
using modhooks::TensorList;
using IValues = std::vector<c10::IValue>;
using nlohmann::json;

/// The holders libtorch's headers declare: every `TORCH_MODULE(Name)` and every hand-written
/// `class Name : public torch::nn::ModuleHolder<...>` outside comments.
std::set<std::string> libtorch_holders() {
  // Whitespace removed, the two forms read "TORCH_MODULE(Name)" and
  // "className:publictorch::nn::ModuleHolder<". (No std::regex: GCC 12 reports false
  // uninitialised uses inside it under the sanitizers.)
  auto identifier = [](const std::string& text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
      return std::isalnum(c) != 0 || c == '_';
    });
  };
  std::set<std::string> names;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(MODHOOKS_TORCH_NN_MODULES_DIR)) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line);) {
      line.erase(std::remove_if(line.begin(), line.end(),
                                [](unsigned char c) { return std::isspace(c) != 0; }),
                 line.end());
      if (line.compare(0, 2, "//") == 0) continue;
      const std::string macro = "TORCH_MODULE(";
      const std::string holder = ":publictorch::nn::ModuleHolder<";
      if (const auto at = line.find(macro); at != std::string::npos) {
        const auto begin = at + macro.size();
        const auto end = line.find(')', begin);
        if (end != std::string::npos && identifier(line.substr(begin, end - begin))) {
          names.insert(line.substr(begin, end - begin));
        }
      } else if (const auto colon = line.find(holder);
                 colon != std::string::npos && line.compare(0, 5, "class") == 0) {
        if (identifier(line.substr(5, colon - 5))) names.insert(line.substr(5, colon - 5));
      }
    }
  }
  return names;
}

TEST(NnModules, EveryLibtorchHolderHasAHookAwareTwin) {
  ASSERT_TRUE(std::filesystem::is_directory(MODHOOKS_TORCH_NN_MODULES_DIR));
  std::set<std::string> expected = libtorch_holders();
  ASSERT_GT(expected.size(), 100u) << "the scan of libtorch's headers found too little";
  // Containers have no forward of their own to hook; modhooks::Sequential stands for Sequential.
  for (const char* container :
       {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Functional"}) {
    EXPECT_EQ(expected.erase(container), 1u) << container;
  }
  const auto& names = modhooks::nn::detail::holder_names();
  const std::set<std::string> actual(names.begin(), names.end());
  EXPECT_EQ(actual.size(), names.size()) << "a holder is listed twice";
  std::vector<std::string> missing, extra;
  std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(),
                      std::back_inserter(missing));
  std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(),
                      std::back_inserter(extra));
  EXPECT_TRUE(missing.empty()) << "modhooks::nn lacks " << ::testing::PrintToString(missing);
  EXPECT_TRUE(extra.empty()) << "libtorch lacks " << ::testing::PrintToString(extra);
}

/// Counts the pre-hook and forward-hook calls of one module, and the arguments the hooks saw.
struct Counter {
  template <class M>
  explicit Counter(M& module) {
    handles.emplace_back(modhooks::register_forward_pre_hook(
        module, [this](torch::nn::Module&, const IValues& args) {
          ++pre;
          arity = args.size();
        }));
    handles.emplace_back(modhooks::register_forward_hook(
        module, [this](torch::nn::Module&, const IValues&, const c10::IValue&) { ++post; }));
  }
  int pre = 0, post = 0;
  std::size_t arity = 0;
  std::vector<ScopedHandle> handles;
};

TEST(NnModules, AHookThatDropsTheHoldersModuleLeavesItAliveUntilTheCallReturns) {
  // The holder calls through its owner, which the call holds (Python's `self`), so a pre-hook
  // that destroys the holder leaves forward and the forward hooks on a live module.
  auto owner = std::make_unique<modhooks::nn::Linear>(4, 3);
  const std::weak_ptr<torch::nn::Module> watch = owner->ptr();
  const at::Tensor x = at::randn({2, 4});
  const at::Tensor expected = (*owner)->forward(x);
  bool alive_in_forward_hook = false;
  ScopedHandle drop(modhooks::register_forward_pre_hook(
      *owner, [&](torch::nn::Module&, const std::vector<c10::IValue>&) { owner.reset(); }));
  ScopedHandle look(modhooks::register_forward_hook(
      *owner, [&](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) {
        alive_in_forward_hook = !watch.expired();
      }));
  const at::Tensor y = (*owner)(x);
  EXPECT_TRUE(alive_in_forward_hook);
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(y.equal(expected));
}

TEST(NnModules, CallingTheHolderFiresHooks) {
  modhooks::nn::Linear linear(4, 3);
  modhooks::nn::Conv2d conv(modhooks::nn::Conv2dOptions(3, 4, 3).stride(2));
  modhooks::nn::LSTM lstm(modhooks::nn::LSTMOptions(4, 5).num_layers(2));
  modhooks::nn::MultiheadAttention attention(8, 2);
  modhooks::nn::TransformerEncoderLayer layer(
      modhooks::nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  modhooks::nn::MSELoss loss;
  Counter c_linear(linear), c_conv(conv), c_lstm(lstm), c_attention(attention), c_layer(layer),
      c_loss(loss);

  EXPECT_EQ(linear(at::randn({2, 4})).sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(conv(at::randn({1, 3, 9, 9})).sizes(), (std::vector<int64_t>{1, 4, 4, 4}));
  auto [seq_out, state] = lstm(at::randn({6, 2, 4}));  // the hidden state is a default argument
  EXPECT_EQ(std::get<0>(state).sizes(), (std::vector<int64_t>{2, 2, 5}));
  auto q = at::randn({5, 2, 8});
  auto [attended, weights] = attention(q, q, q);  // four default arguments
  EXPECT_EQ(weights.sizes(), (std::vector<int64_t>{2, 5, 5}));
  EXPECT_EQ(layer(q).sizes(), q.sizes());
  EXPECT_EQ(loss(at::zeros({3}), at::ones({3})).item<float>(), 1.0f);

  for (auto* c : {&c_linear, &c_conv, &c_lstm, &c_layer}) {
    EXPECT_EQ(c->pre, 1);
    EXPECT_EQ(c->post, 1);
    EXPECT_EQ(c->arity, 1u) << "hooks see the arguments passed, as in Python";
  }
  EXPECT_EQ(c_attention.post, 1);
  EXPECT_EQ(c_attention.arity, 3u);
  EXPECT_EQ(c_loss.post, 1);
  EXPECT_EQ(c_loss.arity, 2u);
}

TEST(NnModules, LibtorchsHolderOfTheSameModuleDoesNot) {
  modhooks::nn::Linear hooked(4, 3);
  torch::nn::Linear plain = hooked;  // the same module
  EXPECT_EQ(plain.get(), hooked.get());
  Counter counter(hooked);
  plain(at::randn({1, 4}));
  EXPECT_EQ(counter.post, 0);
  modhooks::nn::Linear again = plain;
  again(at::randn({1, 4}));
  EXPECT_EQ(counter.post, 1);
}

TEST(NnModules, HoldersGoWhereLibtorchsGo) {
  modhooks::nn::Linear linear(4, 4);
  struct ParentImpl : torch::nn::Module {
    explicit ParentImpl(const modhooks::nn::Linear& child) : fc(register_module("fc", child)) {}
    modhooks::nn::Linear fc;
  };
  ParentImpl parent(linear);
  EXPECT_EQ(parent.named_parameters().keys(), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(parent.fc.get(), linear.get());

  torch::nn::Sequential plain(linear, modhooks::nn::ReLU());
  EXPECT_EQ(plain->size(), 2u);
  EXPECT_EQ(plain->ptr(0).get(), linear.get());

  modhooks::nn::Linear empty = nullptr;
  EXPECT_TRUE(empty.is_empty());
  EXPECT_THROWS_WITH(empty(at::randn({1, 4})), "Accessing empty ModuleHolder");
}

TEST(NnModules, EmbeddingFromPretrainedKeepsItsWeightsAndFiresHooks) {
  auto table = at::randn({5, 3});
  auto embedding = modhooks::nn::Embedding::from_pretrained(table);
  static_assert(std::is_same_v<decltype(embedding), modhooks::nn::Embedding>);
  EXPECT_TRUE(at::equal(embedding->weight, table));
  EXPECT_FALSE(embedding->weight.requires_grad());
  auto bag = modhooks::nn::EmbeddingBag::from_pretrained(
      table, modhooks::nn::EmbeddingBagFromPretrainedOptions().freeze(false));
  EXPECT_TRUE(bag->weight.requires_grad());
  Counter counter(embedding);
  EXPECT_TRUE(at::equal(embedding(at::tensor({1, 4})), table.index_select(0, at::tensor({1, 4}))));
  EXPECT_EQ(counter.post, 1);
}

TEST(NnModules, ModuleListChildrenFireWhenCalledThroughAModhooksHolder) {
  torch::nn::ModuleList list(modhooks::nn::Linear(2, 2));
  modhooks::nn::Linear child = list->ptr<torch::nn::LinearImpl>(0);
  Counter counter(child);
  list[0]->as<torch::nn::LinearImpl>()->forward(at::randn({1, 2}));  // libtorch's way: no hooks
  EXPECT_EQ(counter.post, 0);
  modhooks::nn::Linear(list->ptr<torch::nn::LinearImpl>(0))(at::randn({1, 2}));
  EXPECT_EQ(counter.post, 1);
}

struct TwiceImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return 2 * x; }
};
MODHOOKS_MODULE(Twice);

TEST(NnModules, ModhooksModuleMakesAUserModuleHookable) {
  Twice twice;
  static_assert(std::is_same_v<Twice::Impl, TwiceImpl>);
  auto handle = modhooks::register_forward_hook(
      twice, [](torch::nn::Module&, const IValues&, const c10::IValue& out) {
        return c10::IValue(out.toTensor() + 1);
      });
  EXPECT_EQ(twice(at::ones({1})).item<float>(), 3.0f);
  Twice shared(twice.ptr());
  EXPECT_EQ(shared(at::ones({1})).item<float>(), 3.0f);
  handle.remove();
  EXPECT_EQ(twice(at::ones({1})).item<float>(), 2.0f);
}

// Two models as users write them with libtorch's holders, with only the declarations changed
// to modhooks::nn: tests/python/oracle_nn_holders.py holds their Python twins.

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t c)
      : conv1(register_module(
            "conv1",
            modhooks::nn::Conv2d(modhooks::nn::Conv2dOptions(c, c, 3).padding(1).bias(false)))),
        bn1(register_module("bn1", modhooks::nn::BatchNorm2d(c))),
        conv2(register_module(
            "conv2",
            modhooks::nn::Conv2d(modhooks::nn::Conv2dOptions(c, c, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", modhooks::nn::BatchNorm2d(c))),
        relu(register_module("relu", modhooks::nn::ReLU())) {}
  at::Tensor forward(const at::Tensor& x) {
    auto y = relu(bn1(conv1(x)));
    return relu(bn2(conv2(y)) + x);
  }
  modhooks::nn::Conv2d conv1;
  modhooks::nn::BatchNorm2d bn1;
  modhooks::nn::Conv2d conv2;
  modhooks::nn::BatchNorm2d bn2;
  modhooks::nn::ReLU relu;
};
MODHOOKS_MODULE(Block);

struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(int64_t d, int64_t heads, int64_t ff)
      : self_attn(register_module("self_attn", modhooks::nn::MultiheadAttention(d, heads))),
        linear1(register_module("linear1", modhooks::nn::Linear(d, ff))),
        linear2(register_module("linear2", modhooks::nn::Linear(ff, d))),
        norm1(
            register_module("norm1", modhooks::nn::LayerNorm(modhooks::nn::LayerNormOptions({d})))),
        norm2(register_module("norm2",
                              modhooks::nn::LayerNorm(modhooks::nn::LayerNormOptions({d})))) {}
  at::Tensor forward(at::Tensor x) {
    x = norm1(x + std::get<0>(self_attn(x, x, x)));
    return norm2(x + linear2(at::relu(linear1(x))));
  }
  modhooks::nn::MultiheadAttention self_attn;
  modhooks::nn::Linear linear1, linear2;
  modhooks::nn::LayerNorm norm1, norm2;
};
MODHOOKS_MODULE(EncoderLayer);

/// Keeps its layers in a libtorch ModuleList, and calls each through a modhooks holder.
struct EncoderImpl : torch::nn::Module {
  EncoderImpl(int64_t d, int64_t heads, int64_t ff, int n) {
    for (int i = 0; i < n; ++i) layers->push_back(EncoderLayer(d, heads, ff));
    register_module("layers", layers);
  }
  at::Tensor forward(at::Tensor x) {
    for (std::size_t i = 0; i < layers->size(); ++i) {
      x = EncoderLayer(layers->ptr<EncoderLayerImpl>(i))(x);
    }
    return x;
  }
  torch::nn::ModuleList layers;
};
MODHOOKS_MODULE(Encoder);

at::Tensor from_json(const json& value) {
  if (value.is_number()) return at::scalar_tensor(value.get<double>(), at::kDouble);
  std::vector<at::Tensor> rows;
  for (const auto& row : value) rows.push_back(from_json(row));
  return at::stack(rows);
}

void expect_close(const json& expected, const at::Tensor& actual, const std::string& what) {
  if (expected.is_null()) {
    EXPECT_FALSE(actual.defined()) << what << " should be None";
    return;
  }
  ASSERT_TRUE(actual.defined()) << what << " should be a tensor";
  const auto want = from_json(expected);
  ASSERT_EQ(actual.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(actual.to(at::kDouble), want, 1e-4, 1e-5))
      << what << ": max difference " << (actual.to(at::kDouble) - want).abs().max().item<double>();
}

/// Loads Python's weights into `model`, hooks every module as the oracle did, runs a forward and
/// backward pass and compares what each hook saw with what Python's saw.
template <class Model>
void expect_same_as_python(Model& model, const json& oracle) {
  {
    at::NoGradGuard no_grad;
    std::set<std::string> keys;
    for (auto& item : model->named_parameters()) {
      item.value().copy_(from_json(oracle["weights"].at(item.key())));
      keys.insert(item.key());
    }
    for (auto& item : model->named_buffers()) {
      item.value().copy_(from_json(oracle["weights"].at(item.key())));
      keys.insert(item.key());
    }
    EXPECT_EQ(keys.size(), oracle["weights"].size()) << "the models' state keys differ";
  }
  std::map<std::string, std::vector<json>> expected;
  for (const auto& [name, events] : oracle["events"].items()) expected[name] = events;
  struct Event {
    at::Tensor output;
    TensorList grad_input, grad_output;
  };
  std::map<std::string, std::vector<Event>> seen;
  std::vector<ScopedHandle> handles;
  for (const auto& item : model->named_modules()) {
    auto& events = seen[item.key()];
    handles.emplace_back(modhooks::register_forward_hook(
        item.value(), [&events](torch::nn::Module&, const IValues&, const c10::IValue& out) {
          events.push_back({out.isTuple() ? out.toTupleRef().elements()[0].toTensor().detach()
                                          : out.toTensor().detach(),
                            {},
                            {}});
        }));
    handles.emplace_back(modhooks::register_full_backward_hook(
        item.value(), [&events](torch::nn::Module&, const TensorList& gi, const TensorList& go) {
          events.push_back({{}, gi, {go[0]}});
        }));
  }
  auto x = from_json(oracle["x"]).to(at::kFloat).requires_grad_();
  model(x).pow(3).sum().backward();

  ASSERT_EQ(seen.size(), expected.size());
  for (const auto& [name, events] : seen) {
    const auto& want = expected.at(name);
    ASSERT_EQ(events.size(), want.size()) << "hook calls of `" << name << "`";
    for (std::size_t i = 0; i < events.size(); ++i) {
      const std::string what = "`" + name + "` event " + std::to_string(i);
      if (want[i].contains("output")) {
        expect_close(want[i]["output"], events[i].output, what + " output");
        continue;
      }
      ASSERT_TRUE(want[i].contains("grad_input")) << what;
      const auto& grad_input = events[i].grad_input;
      ASSERT_EQ(grad_input.size(), want[i]["grad_input"].size()) << what;
      if (name.find("self_attn") != std::string::npos) {
        // self_attn(x, x, x): libtorch's C++ attention takes the self-attention path when query,
        // key and value are equal (torch::equal), Python's only when they are the same object,
        // which the backward hook's identity has made them not. So C++ sends the whole gradient
        // to the query and none to key and value; their sum is the same.
        auto sum = at::zeros_like(grad_input[0]);
        for (const auto& g : grad_input) sum = g.defined() ? sum + g : sum;
        auto total = from_json(want[i]["grad_input"][0]) + from_json(want[i]["grad_input"][1]) +
                     from_json(want[i]["grad_input"][2]);
        EXPECT_TRUE(at::allclose(sum.to(at::kDouble), total, 1e-4, 1e-5)) << what;
      } else {
        for (std::size_t j = 0; j < grad_input.size(); ++j) {
          expect_close(want[i]["grad_input"][j], grad_input[j],
                       what + " grad_input " + std::to_string(j));
        }
      }
      expect_close(want[i]["grad_output"][0], events[i].grad_output[0], what + " grad_output");
    }
  }
  expect_close(oracle["x_grad"], x.grad(), "x.grad");
}

json oracle(const std::string& model) {
  std::ifstream file(std::string(MODHOOKS_FIXTURES) + "/nn_holders_oracle.json");
  if (!file) ADD_FAILURE() << "run the python_oracle test first";
  return file ? json::parse(file)[model] : json();
}

TEST(NnModules, ResidualBlockHooksSeeWhatPythonsSee) {
  const json expected = oracle("block");
  if (expected.is_null()) return;
  Block block(3);
  expect_same_as_python(block, expected);
}

TEST(NnModules, TransformerEncoderHooksSeeWhatPythonsSee) {
  const json expected = oracle("encoder");
  if (expected.is_null()) return;
  Encoder encoder(8, 2, 16, 2);
  expect_same_as_python(encoder, expected);
}

}  // namespace
