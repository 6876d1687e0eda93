// Tests of include/modhooks/state/module_state.h and state_hooks.h: state_dict and
// load_state_dict with their hooks (scenarios 10, 13, 14, 16, 44-51 and (d), (e), (f) of
// section 11, where (e) is inverted: modhooks' load is all-or-nothing).
#include "modhooks/state/module_state.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <string>
#include <vector>

#include "nets.h"
#include "test_util.h"

namespace {

using modhooks::IncompatibleKeys;
using modhooks::Metadata;
using modhooks::ScopedHandle;
using modhooks::StateDict;
using Strings = std::vector<std::string>;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    linear1 = register_module("linear1", torch::nn::Linear(5, 5));
    linear2 = register_module("linear2", linear1);  // shared under two names, as in Python
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
    block = register_module("block", modhooks::Sequential(torch::nn::Conv2d(3, 3, 3)));
  }
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  modhooks::Sequential block{nullptr};
};
TORCH_MODULE(Net);

TEST(StateDictTraversal, PythonKeysOrderAndMetadata) {
  Net net;
  auto sd = modhooks::state_dict(net);
  EXPECT_EQ(sd.keys(), (Strings{"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                                "bn.num_batches_tracked", "block.0.weight", "block.0.bias"}));
  EXPECT_EQ(sd.at("bn.num_batches_tracked").scalar_type(), at::kLong);
  EXPECT_FALSE(sd.at("linear1.weight").requires_grad());  // detached
  EXPECT_EQ(sd.at("linear1.weight").data_ptr(), net->linear1->weight.data_ptr());
  EXPECT_EQ(sd.metadata().keys(), (Strings{"", "linear1", "linear2", "bn", "block", "block.0"}));
  EXPECT_EQ(sd.metadata().at("bn").at("version"), 1);
  auto kept = modhooks::state_dict(net, "", /*keep_vars=*/true);
  EXPECT_TRUE(kept.at("linear1.weight").requires_grad());
}

TEST(StateDictTraversal, UndefinedAndNonPersistentTensorsAreLeftOut) {
  torch::nn::Linear no_bias(torch::nn::LinearOptions(2, 2).bias(false));
  modhooks::register_buffer(no_bias, "scratch", at::zeros({2}), /*persistent=*/false);
  modhooks::register_buffer(no_bias, "kept", at::ones({2}));
  EXPECT_EQ(modhooks::state_dict(no_bias).keys(), (Strings{"weight", "kept"}));
}

TEST(StateDictHooks, PreAndPostHooksGetTheirPrefixes) {
  // Scenario 16, plus post-hooks on nested submodules and a post-hook that adds an entry.
  Net net;
  std::vector<std::string> seen;
  auto pre = [&](torch::nn::Module&, const std::string& prefix, bool keep_vars) {
    EXPECT_TRUE(keep_vars);
    seen.push_back("pre " + prefix);
  };
  ScopedHandle a(modhooks::register_state_dict_pre_hook(net, pre));
  ScopedHandle b(modhooks::register_state_dict_pre_hook(net->block, pre));
  ScopedHandle c(modhooks::register_state_dict_post_hook(
      net->block->ptr(0),
      [&](torch::nn::Module&, StateDict& sd, const std::string& prefix, const Metadata& metadata) {
        EXPECT_EQ(metadata.at("version"), 1);
        EXPECT_TRUE(sd.contains(prefix + "weight"));
        seen.push_back("post " + prefix);
      }));
  ScopedHandle d(modhooks::register_state_dict_post_hook(
      net, [&](torch::nn::Module&, StateDict& sd, const std::string& prefix, const Metadata&) {
        seen.push_back("post " + prefix);
        sd.insert_or_assign(prefix + "extra", at::ones({1}));
      }));
  auto sd = modhooks::state_dict(net, "foo.", /*keep_vars=*/true);
  EXPECT_EQ(seen, (Strings{"pre foo.", "pre foo.block.", "post foo.block.0.", "post foo."}));
  EXPECT_EQ(sd.keys().back(), "foo.extra");
  EXPECT_TRUE(sd.metadata().contains("foo"));
}

TEST(LoadStateDict, RoundTripCopiesValuesInPlace) {
  // Scenario 46, first part.
  Net source, target;
  auto sd = modhooks::state_dict(source);
  const auto* weight_before = target->linear1->weight.data_ptr();
  auto keys = modhooks::load_state_dict(target, sd);
  EXPECT_TRUE(keys.missing_keys.empty());
  EXPECT_TRUE(keys.unexpected_keys.empty());
  EXPECT_TRUE(at::equal(target->linear1->weight, source->linear1->weight));
  EXPECT_TRUE(at::equal(target->block->ptr(0)->named_parameters()["weight"],
                        source->block->ptr(0)->named_parameters()["weight"]));
  EXPECT_EQ(target->linear1->weight.data_ptr(), weight_before);  // copy_, not a swap
  EXPECT_TRUE(target->linear1->weight.requires_grad());
}

TEST(LoadStateDict, MissingAndUnexpectedKeysInPythonsWords) {
  // Scenarios 46 and 50.
  Net net;
  auto sd = modhooks::state_dict(Net());
  sd.insert_or_assign("extra", at::ones({1}));
  EXPECT_THROWS_WITH(modhooks::load_state_dict(net, sd),
                     "Error(s) in loading state_dict for Net:\n\tUnexpected key(s) in state_dict: "
                     "\"extra\". ");
  auto keys = modhooks::load_state_dict(net, sd, /*strict=*/false);
  EXPECT_EQ(keys.unexpected_keys, Strings{"extra"});
  sd.erase("extra");
  sd.insert_or_assign("linear1.weight.bad_suffix", at::ones({1}));
  sd.insert_or_assign("bn.bad_suffix", at::ones({1}));
  sd.insert_or_assign("extra.param", at::ones({1}));
  sd.erase("linear1.weight");
  keys = modhooks::load_state_dict(net, sd, /*strict=*/false);
  EXPECT_EQ(keys.missing_keys, Strings{"linear1.weight"});
  EXPECT_EQ(keys.unexpected_keys,
            (Strings{"extra.param", "linear1.weight.bad_suffix", "bn.bad_suffix"}));
  EXPECT_THROWS_WITH(modhooks::load_state_dict(net, sd),
                     "Missing key(s) in state_dict: \"linear1.weight\". \n\tUnexpected key(s) in "
                     "state_dict: \"extra.param\", \"linear1.weight.bad_suffix\", "
                     "\"bn.bad_suffix\". ");
}

TEST(LoadStateDict, SizeMismatchRaisesEvenNonStrictAndChangesNothing) {
  // Scenario 46 (wrong-size running_mean) and (e), inverted: the first keys stay untouched.
  Net net;
  auto before = modhooks::state_dict(net);
  std::vector<at::Tensor> saved;
  for (const auto& [key, t] : before) saved.push_back(t.clone());
  auto sd = modhooks::state_dict(Net());
  sd.insert_or_assign("block.0.bias", at::ones({4}));  // the last key
  EXPECT_THROWS_WITH(modhooks::load_state_dict(net, sd, /*strict=*/false),
                     "size mismatch for block.0.bias: copying a param with shape torch.Size([4]) "
                     "from checkpoint, the shape in current model is torch.Size([3]).");
  std::size_t i = 0;
  for (const auto& [key, t] : modhooks::state_dict(net)) {
    EXPECT_TRUE(at::equal(t, saved[i++])) << key << " changed";
  }
}

TEST(LoadStateDict, PartialNonStrictLoadLeavesTheRestAlone) {
  Net net;
  auto original_bias = net->linear1->bias.clone();
  StateDict sd;
  sd.insert_or_assign("linear1.weight", at::zeros({5, 5}));
  auto keys = modhooks::load_state_dict(net, sd, /*strict=*/false);
  EXPECT_TRUE(net->linear1->weight.eq(0).all().item<bool>());
  EXPECT_TRUE(at::equal(net->linear1->bias, original_bias));
  EXPECT_EQ(keys.missing_keys.size(), 10u);
}

TEST(LoadStateDict, DtypeConversionAndTheZeroDimRule) {
  torch::nn::BatchNorm1d bn(2);
  auto sd = modhooks::state_dict(bn);
  sd.insert_or_assign("weight", at::full({2}, 3.0, at::kDouble));
  sd.insert_or_assign("num_batches_tracked", at::full({1}, 7, at::kLong));  // 1-dim into 0-dim
  modhooks::load_state_dict(bn, sd);
  EXPECT_EQ(bn->weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(bn->weight.eq(3).all().item<bool>());
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 7);
}

TEST(LoadStateDict, AssignSwapsTensorsInAndKeepsRequiresGrad) {
  // Scenario 51.
  torch::nn::Linear linear(3, 2);
  auto sd = modhooks::state_dict(torch::nn::Linear(3, 2));
  auto strided = at::randn({3, 2}).t();
  sd.insert_or_assign("weight", strided);
  const at::Tensor param = linear->weight;
  modhooks::load_state_dict(linear, sd, true, /*assign=*/true);
  EXPECT_EQ(linear->weight.data_ptr(), strided.data_ptr());
  EXPECT_TRUE(param.is_same(linear->weight));  // the same tensor object, new storage
  EXPECT_TRUE(linear->weight.requires_grad());
  sd.insert_or_assign("weight", at::randn({2, 2}));
  EXPECT_THROWS_WITH(modhooks::load_state_dict(linear, sd, true, true),
                     "size mismatch for weight: copying a param with shape");
}

TEST(LoadStateDict, UndefinedValueIsAClearError) {
  // Scenario 44's C++ form: a value that is not a tensor.
  torch::nn::Linear linear(2, 2);
  auto sd = modhooks::state_dict(linear);
  sd.insert_or_assign("bias", at::Tensor());
  EXPECT_THROWS_WITH(modhooks::load_state_dict(linear, sd),
                     "While copying the parameter named \"bias\", expected torch.Tensor or "
                     "Tensor-like object from checkpoint but received");
}

TEST(LoadStateDictHooks, PreHookMigratesKeysWithoutTouchingTheCallersDict) {
  // Key migration old -> new by a pre-hook on a child; the child sees only its own keys and
  // strict is always true (scenario 48 and (f)).
  Net net;
  auto sd = modhooks::state_dict(Net());
  const auto w = sd.at("bn.weight");
  sd.erase("bn.weight");
  sd.insert_or_assign("bn.gamma", w);
  int calls = 0;
  ScopedHandle h(modhooks::register_load_state_dict_pre_hook(
      net->bn,
      [&](torch::nn::Module& m, StateDict& local, const std::string& prefix, const Metadata&,
          bool strict, Strings& missing, Strings& unexpected, Strings& errors) {
        ++calls;
        EXPECT_EQ(&m, net->bn.get());
        EXPECT_EQ(prefix, "bn.");
        EXPECT_TRUE(strict);
        EXPECT_TRUE(missing.empty() && unexpected.empty() && errors.empty());
        EXPECT_EQ(local.size(), 5u);
        if (local.contains(prefix + "gamma")) {
          local.insert_or_assign(prefix + "weight", local.at(prefix + "gamma"));
          local.erase(prefix + "gamma");
        }
      }));
  modhooks::load_state_dict(net, sd, /*strict=*/false);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(at::equal(net->bn->weight, w));
  EXPECT_TRUE(sd.contains("bn.gamma"));
  EXPECT_FALSE(sd.contains("bn.weight"));
}

TEST(LoadStateDictHooks, PostHooksEditTheListsAndStrictUsesTheEditedOnes) {
  // Scenario 14, and a post-hook clearing missing_keys so a strict load passes.
  Net net;
  auto sd = modhooks::state_dict(Net());
  int calls = 0;
  auto h = modhooks::register_load_state_dict_post_hook(
      net->bn, [&](torch::nn::Module&, IncompatibleKeys& keys) {
        ++calls;
        keys.missing_keys.push_back("foo");
        keys.unexpected_keys.push_back("bar");
      });
  auto keys = modhooks::load_state_dict(net, sd, /*strict=*/false);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(keys.missing_keys, Strings{"foo"});
  EXPECT_EQ(keys.unexpected_keys, Strings{"bar"});
  EXPECT_THROWS_WITH(modhooks::load_state_dict(net, sd),
                     "Missing key(s) in state_dict: \"foo\". \n\tUnexpected key(s) in "
                     "state_dict: \"bar\". ");
  h.remove();
  keys = modhooks::load_state_dict(net, sd, false);
  EXPECT_TRUE(keys.missing_keys.empty() && keys.unexpected_keys.empty());

  sd.erase("linear1.weight");
  sd.insert_or_assign("extra", at::ones({1}));
  ScopedHandle clear(modhooks::register_load_state_dict_post_hook(
      net, [](torch::nn::Module&, IncompatibleKeys& keys) {
        keys.missing_keys.clear();
        keys.unexpected_keys.clear();
      }));
  keys = modhooks::load_state_dict(net, sd);
  EXPECT_TRUE(keys.missing_keys.empty() && keys.unexpected_keys.empty());
}

TEST(LoadStateDictHooks, HooksMayRemoveThemselvesWhileRunning) {
  Net net;
  auto sd = modhooks::state_dict(Net());
  int calls = 0;
  auto handles = std::make_shared<std::vector<modhooks::RemovableHandle>>();
  for (int i = 0; i < 3; ++i) {
    handles->push_back(modhooks::register_load_state_dict_post_hook(
        net, [&calls, handles, i](torch::nn::Module&, IncompatibleKeys&) {
          ++calls;
          (*handles)[i].remove();
        }));
  }
  modhooks::load_state_dict(net, sd);
  modhooks::load_state_dict(net, sd);
  EXPECT_EQ(calls, 3);
}

TEST(LoadStateDictHooks, StrictFailureAfterPostHooksUndoesTheLoad) {
  Net net;
  const auto before = net->linear1->weight.clone();
  auto sd = modhooks::state_dict(Net());
  bool saw_new_weights = false;
  ScopedHandle h(modhooks::register_load_state_dict_post_hook(
      net, [&](torch::nn::Module&, IncompatibleKeys& keys) {
        saw_new_weights = !at::equal(net->linear1->weight, before);
        keys.missing_keys.push_back("made.up");
      }));
  EXPECT_THROWS_WITH(modhooks::load_state_dict(net, sd), "\"made.up\"");
  EXPECT_TRUE(saw_new_weights);  // post-hooks see the loaded weights
  EXPECT_TRUE(at::equal(net->linear1->weight, before));
}

TEST(LoadStateDictHooks, OrderIsPreLoadPostAndPostHooksSeeAccumulatedKeys) {
  Net net;
  std::vector<std::string> order;
  auto sd = modhooks::state_dict(Net());
  sd.insert_or_assign("bn.unknown", at::ones({1}));
  sd.insert_or_assign("block.unknown", at::ones({1}));
  ScopedHandle post_bn(modhooks::register_load_state_dict_post_hook(
      net->bn, [&](torch::nn::Module&, IncompatibleKeys& keys) {
        order.push_back("post bn " + std::to_string(keys.unexpected_keys.size()));
      }));
  ScopedHandle post_root(modhooks::register_load_state_dict_post_hook(
      net, [&](torch::nn::Module&, IncompatibleKeys& keys) {
        order.push_back("post root " + std::to_string(keys.unexpected_keys.size()));
      }));
  ScopedHandle pre_root(modhooks::register_load_state_dict_pre_hook(
      net,
      [&](torch::nn::Module&, StateDict& local, const std::string&, const Metadata&, bool, Strings&,
          Strings&, Strings&) { order.push_back("pre root " + std::to_string(local.size())); }));
  modhooks::load_state_dict(net, sd, false);
  EXPECT_EQ(order, (Strings{"pre root 13", "post bn 1", "post root 2"}));
}

}  // namespace
