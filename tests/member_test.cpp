// SPDX-License-Identifier: BSD-3-Clause
// modhooks/nn/utils/member.h: where a module's forward reads the tensor a utility computes, for
// the user's own modules (declared) and for libtorch's layers (known), and the refusals.
#include "modhooks/nn/utils/member.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>

#include <functional>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

namespace {

namespace nu = modhooks::nn::utils;

struct NetImpl : torch::nn::Module {
  at::Tensor w = register_parameter("w", at::randn({4, 4}));
  at::Tensor forward(const at::Tensor& x) { return x.matmul(w); }
};
MODHOOKS_MODULE(Net);

TEST(DeclareMember, EachForwardReadsANewTensorThroughTheDeclaredMember) {
  Net net;
  const at::Tensor w = net->w;
  nu::declare_member(net, "w", net->w);
  nu::weight_norm(net, "w");
  const at::Tensor x = at::randn({2, 4});
  const at::Tensor y = net(x);
  const auto params = net->named_parameters();
  const at::Tensor expected = x.matmul(at::_weight_norm(params["w_v"], params["w_g"], 0));
  EXPECT_TRUE(at::allclose(y, expected));
  EXPECT_FALSE(net->w.is_same(w));
  const at::Tensor first = net->w;
  y.sum().backward();
  EXPECT_TRUE(params["w_g"].grad().defined());
  EXPECT_TRUE(params["w_v"].grad().defined());
  net(x);
  EXPECT_FALSE(net->w.is_same(first));  // a tensor of its own each forward
  nu::remove_weight_norm(net, "w");
  EXPECT_TRUE(net->w.is_same(net->named_parameters()["w"]));
  EXPECT_TRUE(net->w.is_leaf());
}

TEST(DeclareMember, AnUndeclaredMemberIsRefusedBeforeAnythingChanges) {
  const std::vector<std::pair<std::string, std::function<void(Net&)>>> utilities{
      {"weight_norm", [](Net& n) { nu::weight_norm(n, "w"); }},
      {"spectral_norm", [](Net& n) { nu::spectral_norm(n, "w"); }},
      {"prune", [](Net& n) { nu::prune::l1_unstructured(n, "w", 0.5); }},
      {"global prune",
       [](Net& n) {
         nu::prune::global_unstructured({{n, "w"}}, nu::prune::L1Unstructured, 0.5);
       }},
      {"parametrizations::weight_norm", [](Net& n) { nu::parametrizations::weight_norm(n, "w"); }},
      {"parametrizations::spectral_norm",
       [](Net& n) { nu::parametrizations::spectral_norm(n, "w"); }},
  };
  for (const auto& [what, apply] : utilities) {
    SCOPED_TRACE(what);
    Net net;
    const at::Tensor w = net->w;
    const at::Tensor value = w.detach().clone();
    try {
      apply(net);
      ADD_FAILURE() << "not refused";
    } catch (const modhooks::RuntimeError& e) {
      EXPECT_STREQ(e.id(), "nn.utils.member.unknown");
      EXPECT_NE(std::string(e.what()).find("declare_member(module, \"w\", module->w)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(net->named_parameters().keys(), std::vector<std::string>{"w"});
    EXPECT_TRUE(net->named_parameters()["w"].is_same(w));
    EXPECT_TRUE(net->w.is_same(w));
    EXPECT_TRUE(at::equal(w, value));
    EXPECT_TRUE(net->named_children().is_empty());
  }
}

TEST(DeclareMember, TheMemberMustHoldTheRegisteredTensor) {
  Net net;
  at::Tensor other = at::zeros({4, 4});
  try {
    nu::declare_member(net, "w", other);
    FAIL();
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.id(), "nn.utils.member.other_tensor");
  }
  EXPECT_THROW(nu::declare_member(net, "nope", net->w), modhooks::AttributeError);
  // Nothing was declared: a utility is still refused.
  EXPECT_THROW(nu::weight_norm(net, "w"), modhooks::RuntimeError);
}

/// A libtorch layer, the tensor a utility goes on, and how to run it.
struct Layer {
  std::string what;
  std::shared_ptr<torch::nn::Module> module;
  std::string name;
  std::function<at::Tensor()> forward;  // through modhooks::call
};

std::vector<Layer> layers() {
  namespace tn = torch::nn;
  std::vector<Layer> out;
  auto add = [&out](std::string what, auto holder, std::string name, at::Tensor x) {
    out.push_back(Layer{std::move(what), holder.ptr(), std::move(name),
                        [holder, x] { return modhooks::call(holder, x); }});
  };
  add("Linear", tn::Linear(4, 3), "weight", at::randn({2, 4}));
  add("BatchNorm1d", tn::BatchNorm1d(4), "weight", at::randn({3, 4}));
  add("InstanceNorm1d", tn::InstanceNorm1d(tn::InstanceNorm1dOptions(4).affine(true)), "bias",
      at::randn({2, 4, 5}));
  add("LayerNorm", tn::LayerNorm(tn::LayerNormOptions({4})), "weight", at::randn({2, 4}));
  add("GroupNorm", tn::GroupNorm(2, 4), "weight", at::randn({2, 4, 3}));
  add("PReLU", tn::PReLU(tn::PReLUOptions().num_parameters(4)), "weight", at::randn({2, 4}));
  add("EmbeddingBag", tn::EmbeddingBag(tn::EmbeddingBagOptions(6, 4)), "weight",
      at::tensor({0, 2, 5, 1}, at::kLong).reshape({2, 2}));
  tn::LSTMCell cell(3, 4);
  const at::Tensor input = at::randn({2, 3});
  out.push_back({"LSTMCell", cell.ptr(), "weight_hh",
                 [cell, input] { return std::get<0>(modhooks::call(cell, input)); }});
  tn::GRU gru(tn::GRUOptions(3, 4));
  const at::Tensor seq = at::randn({5, 2, 3});
  out.push_back({"GRU", gru.ptr(), "weight_hh_l0",
                 [gru, seq] { return std::get<0>(modhooks::call(gru, seq)); }});
  tn::MultiheadAttention mha(tn::MultiheadAttentionOptions(4, 2));
  const at::Tensor q = at::randn({3, 2, 4});
  out.push_back({"MultiheadAttention", mha.ptr(), "in_proj_weight",
                 [mha, q] { return std::get<0>(modhooks::call(mha, q, q, q)); }});
  return out;
}

TEST(DeclareMember, LibtorchsLayersNeedNoDeclaration) {
  // A mask of zeros prunes the whole tensor: the forward must read the pruned one.
  for (const Layer& layer : layers()) {
    SCOPED_TRACE(layer.what);
    const at::Tensor tensor = layer.module->named_parameters(false)[layer.name];
    nu::prune::custom_from_mask(layer.module, layer.name, at::zeros_like(tensor));
    const at::Tensor pruned = layer.forward();
    nu::prune::remove(layer.module, layer.name);  // the parameter again, holding zeros
    EXPECT_TRUE(at::equal(tensor, at::zeros_like(tensor)));
    EXPECT_TRUE(at::allclose(pruned, layer.forward()));
    EXPECT_TRUE(layer.module->named_parameters(false)[layer.name].is_same(tensor));
  }
}

TEST(DeclareMember, AnRnnsFlatWeightsAreSetAgainAfterTo) {
  // `to()` rebuilds an RNN's flat weights from its parameters, where the computed tensor is
  // not: the next forward, served or not, sets it again.
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(3, 4));
  nu::weight_norm(lstm, "weight_hh_l0");
  const at::Tensor x = at::randn({5, 2, 3}, at::kDouble);
  lstm->to(at::kDouble);
  lstm->eval();
  at::Tensor served;
  {
    at::NoGradGuard no_grad;
    served = std::get<0>(modhooks::call(lstm, x));
  }
  const at::Tensor with_grad = std::get<0>(modhooks::call(lstm, x));
  EXPECT_EQ(served.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(served, with_grad.detach()));
  // The same when the weights did not change: only the flat weights were rebuilt.
  at::NoGradGuard no_grad;
  modhooks::call(lstm, x);
  lstm->to(at::kDouble);  // the same dtype: the weights stay, the flat weights are rebuilt
  EXPECT_TRUE(at::equal(std::get<0>(modhooks::call(lstm, x)), served));
}

}  // namespace
