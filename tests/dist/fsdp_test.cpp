// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// fully_shard in a world of one process, over Gloo (CPU tensors) and over NCCL (CUDA tensors,
// where there is a GPU). With one rank a shard is the whole parameter and the reduced gradient
// the rank's own, so a sharded model must train exactly as its bare twin; the choreography
// (gather, free, gather again before backward, reduce after) still runs in full. The errors
// that one process can raise are here too (tests/dist/fsdp_parity.cpp has those that need
// several ranks), each leaving the model as it was.
#include <gtest/gtest.h>
#include <modhooks/dist.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "world_of_one.h"

namespace dist = modhooks::dist;

namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out)
      : a(register_module("a", torch::nn::Linear(in, 24))),
        b(register_module("b", torch::nn::Linear(24, out))) {}
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(b, torch::relu(modhooks::call(a, x)));
  }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Block);

/// Two blocks, one of them run twice in a forward, and a head the root's group holds.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : block0(register_module("block0", Block(13, 16))),
        block1(register_module("block1", Block(16, 16))),
        head(register_module("head", torch::nn::Linear(16, 5))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(block0, x));
    h = torch::relu(modhooks::call(block1, h));
    h = torch::relu(modhooks::call(block1, h));
    return modhooks::call(head, h);
  }
  Block block0, block1;
  torch::nn::Linear head;
};
TORCH_MODULE(Net);

void shard(Net& net) {
  dist::fully_shard(net->block0);
  dist::fully_shard(net->block1);
  dist::fully_shard(net);
}

template <class F>
std::string error_id(F&& f) {
  try {
    f();
  } catch (const modhooks::Error& e) {
    return e.id();
  }
  return "no error";
}

/// One SGD step of a sharded model and of its bare twin on `x`.
template <class Holder>
void step_twins(Holder& net, Holder& bare, torch::optim::Optimizer& opt,
                torch::optim::Optimizer& bare_opt, const at::Tensor& x) {
  modhooks::call(net, x).pow(2).sum().backward();
  opt.step();
  opt.zero_grad();
  modhooks::call(bare, x).pow(2).sum().backward();
  bare_opt.step();
  bare_opt.zero_grad();
}

class FsdpWorldOfOne : public WorldOfOne {};

TEST_P(FsdpWorldOfOne, TrainsAsTheBareModelWithGradientAccumulation) {
  auto [net, bare] = twins<Net>(3);
  shard(net);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD bare_opt(bare->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto loss = [&](auto& model, int k) {
    torch::manual_seed(100 + k);
    const at::Tensor x = torch::randn({8, 13}).to(device());
    const at::Tensor y = torch::randn({8, 5}).to(device());
    return torch::mse_loss(modhooks::call(model, x), y);
  };
  for (int step = 0; step < 4; ++step) {
    // Two micro-batches: the first keeps its whole gradients, the second reduces both.
    dist::set_requires_gradient_sync(net, false);
    loss(net, 2 * step).backward();
    dist::set_requires_gradient_sync(net, true);
    loss(net, 2 * step + 1).backward();
    opt.step();
    dist::zero_grad(net);
    loss(bare, 2 * step).backward();
    loss(bare, 2 * step + 1).backward();
    bare_opt.step();
    bare_opt.zero_grad();
    // Between steps the modules' members are their shards, trained, as Python's
    // `module.weight` (the root's group too: its backward reshards it).
    EXPECT_TRUE(net->block1->b->weight.equal(bare->block1->b->weight)) << "step " << step;
    EXPECT_TRUE(net->head->weight.equal(bare->head->weight)) << "step " << step;
  }
  const modhooks::StateDict bare_sd = modhooks::state_dict(bare);
  const auto shards = net->named_parameters();
  ASSERT_EQ(shards.size(), bare_sd.size());
  for (const auto& item : shards) {
    const at::Tensor& expected = bare_sd.at(item.key());
    EXPECT_TRUE(item.value().equal(expected))
        << item.key() << " differs by " << (item.value() - expected).abs().max().item<double>();
  }
  EXPECT_TRUE(net->block0->a->weight.is_same(net->named_parameters()["block0.a.weight"]));
  EXPECT_TRUE(net->head->weight.is_same(net->named_parameters()["head.weight"]));
  // The full state dict is the bare model's.
  const modhooks::StateDict full =
      dist::get_model_state_dict(net, dist::StateDictOptions().full_state_dict(true));
  for (const auto& [key, value] : bare_sd) EXPECT_TRUE(full.at(key).equal(value)) << key;
}

TEST_P(FsdpWorldOfOne, TheModuleShowsItsShardsOutsideForwardAndTheWholeParametersInside) {
  auto [net, bare] = twins<Net>(3);
  const at::Tensor original = net->block0->a->weight;
  shard(net);
  // The parameter table and the member hold the shard, the tensor the optimizer trains (Python's
  // `module.weight` is the sharded parameter); a handle taken before fully_shard reads the
  // shard's values, never freed storage.
  const at::Tensor shard = net->block0->a->named_parameters(false)["weight"];
  EXPECT_TRUE(net->block0->a->weight.is_same(shard));
  EXPECT_FALSE(original.is_same(shard));
  EXPECT_TRUE(original.equal(shard));
  EXPECT_TRUE(shard.requires_grad());
  EXPECT_TRUE(shard.is_leaf());
  // Inside its forward the module shows the whole parameter, in its member and its table.
  int inside = 0;
  auto hook = modhooks::register_forward_pre_hook(
      net->block0->a, [&](torch::nn::Module& m, const std::vector<c10::IValue>&) {
        auto& linear = static_cast<torch::nn::LinearImpl&>(m);
        EXPECT_FALSE(linear.weight.is_same(shard));
        EXPECT_TRUE(linear.weight.is_same(linear.named_parameters(false)["weight"]));
        EXPECT_TRUE(linear.weight.equal(shard));
        ++inside;
      });
  const at::Tensor x = torch::randn({4, 13}).to(device());
  modhooks::call(net, x).sum().backward();
  EXPECT_EQ(inside, 1);
  // After backward, the shards again: they read and print.
  EXPECT_TRUE(net->block0->a->weight.is_same(shard));
  EXPECT_TRUE(net->head->weight.is_same(net->head->named_parameters(false)["weight"]));
  std::ostringstream printed;
  printed << *net << net->block0->a->weight << original;
  EXPECT_NE(printed.str().find("block0"), std::string::npos);
  std::vector<std::string> keys;
  for (const auto& item : net->named_parameters()) keys.push_back(item.key());
  std::vector<std::string> bare_keys;
  for (const auto& item : bare->named_parameters()) bare_keys.push_back(item.key());
  EXPECT_EQ(keys, bare_keys);
}

/// A module of the user's own, its forward reading its member `w`.
struct OwnImpl : torch::nn::Module {
  at::Tensor w = register_parameter("w", torch::randn({6, 13}));
  at::Tensor forward(const at::Tensor& x) { return x.matmul(w.t()); }
};
MODHOOKS_MODULE(Own);

TEST_P(FsdpWorldOfOne, AModulesOwnMemberTrainsDeclaredOrNot) {
  for (const bool declared : {true, false}) {
    torch::manual_seed(5);
    Own net;
    Own bare;
    modhooks::load_state_dict(bare, modhooks::state_dict(net));
    net->to(device());
    bare->to(device());
    const at::Tensor original = net->w;
    if (declared) modhooks::nn::utils::declare_member(net, "w", net->w);
    dist::fully_shard(net);
    const at::Tensor shard = net->named_parameters()["w"];
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    torch::optim::SGD bare_opt(bare->parameters(), torch::optim::SGDOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      const at::Tensor x = torch::randn({3, 13}).to(device());
      step_twins(net, bare, opt, bare_opt, x);
    }
    EXPECT_TRUE(shard.equal(bare->w)) << "declared " << declared;
    // A declared member is the shard, as a libtorch layer's; an undeclared one keeps the tensor
    // it held and reads the shard's values through it.
    EXPECT_EQ(net->w.is_same(shard), declared);
    EXPECT_TRUE(net->w.equal(bare->w)) << "declared " << declared;
    EXPECT_TRUE(original.equal(bare->w)) << "declared " << declared;
  }
}

/// A module that returns what it is told to: its output, or its own weight or a view of it.
struct ReturnsImpl : torch::nn::Module {
  ReturnsImpl() : fc(register_module("fc", torch::nn::Linear(13, 5))) {}
  at::Tensor forward(const at::Tensor& x) {
    if (what == 1) return fc->weight;
    if (what == 2) return fc->weight.t();
    if (what == 3) return fc->weight.clone();
    return modhooks::call(fc, x);
  }
  torch::nn::Linear fc;
  int what = 0;
};
MODHOOKS_MODULE(Returns);

TEST_P(FsdpWorldOfOne, AForwardThatReturnsItsOwnParameterIsRefused) {
  // Python's FSDP returns the whole parameter and frees its storage under it (reading it later
  // fails); modhooks refuses at once, and the model trains on.
  torch::manual_seed(6);
  Returns net;
  net->to(device());
  dist::fully_shard(net);
  const at::Tensor x = torch::randn({2, 13}).to(device());
  for (const int what : {1, 2}) {
    net->what = what;
    EXPECT_EQ(error_id([&] { modhooks::call(net, x); }), "dist.fsdp.output_is_parameter");
  }
  net->what = 3;
  const at::Tensor copy = modhooks::call(net, x);
  net->what = 0;
  modhooks::call(net, x).sum().backward();
  EXPECT_TRUE(copy.equal(net->fc->weight)) << "the copy holds the weight's values";
  EXPECT_TRUE(net->fc->weight.grad().defined());
}

TEST_P(FsdpWorldOfOne, AHookThatRaisesMidForwardLeavesTheModelTrainable) {
  auto [net, bare] = twins<Net>(3);
  shard(net);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD bare_opt(bare->parameters(), torch::optim::SGDOptions(0.1));
  bool raise = true;
  auto hook = modhooks::register_forward_hook(net->block1->a,
                                              [&](torch::nn::Module&, const auto&, const auto&) {
                                                if (raise)
                                                  throw std::runtime_error("the user's hook fails");
                                              });
  const at::Tensor x = torch::randn({4, 13}).to(device());
  EXPECT_THROW(modhooks::call(net, x), std::exception);
  // The failed call resharded the groups it gathered (the root's keeps its whole parameters
  // until a backward, as after any forward).
  EXPECT_TRUE(net->block1->a->weight.is_same(net->named_parameters()["block1.a.weight"]));
  EXPECT_TRUE(net->block1->b->bias.is_same(opt.param_groups()[0].params()[7]));
  raise = false;
  for (int step = 0; step < 2; ++step) {
    step_twins(net, bare, opt, bare_opt, x);
  }
  const auto trained = bare->named_parameters();
  for (const auto& item : net->named_parameters()) {
    EXPECT_TRUE(item.value().equal(trained[item.key()])) << item.key();
  }
}

TEST_P(FsdpWorldOfOne, AFrozenShardFreezesTheWholeParameter) {
  auto [net, bare] = twins<Net>(3);
  shard(net);
  net->named_parameters()["head.bias"].requires_grad_(false);
  modhooks::call(net, torch::randn({4, 13}).to(device())).sum().backward();
  const auto params = net->named_parameters();
  EXPECT_FALSE(params["head.bias"].grad().defined());
  EXPECT_TRUE(params["head.weight"].grad().defined());
  EXPECT_TRUE(params["block0.a.weight"].grad().defined());
}

TEST_P(FsdpWorldOfOne, StateDictsGoBothWays) {
  auto [net, bare] = twins<Net>(3);
  shard(net);
  torch::manual_seed(9);
  Net other;
  other->to(device());
  shard(other);
  const modhooks::StateDict full = dist::get_model_state_dict(
      net, dist::StateDictOptions().full_state_dict(true).cpu_offload(true));
  for (const auto& [key, value] : full) EXPECT_EQ(value.device(), at::Device(at::kCPU)) << key;
  dist::set_model_state_dict(
      other, full, dist::StateDictOptions().full_state_dict(true).broadcast_from_rank0(true));
  const modhooks::StateDict sharded = dist::get_model_state_dict(other);
  for (const auto& [key, value] : modhooks::state_dict(bare)) {
    EXPECT_TRUE(sharded.at(key).equal(value)) << key;
  }
  // Each rank's shards load back as they are.
  dist::set_model_state_dict(net, sharded);
  for (const auto& [key, value] : dist::get_model_state_dict(net)) {
    EXPECT_TRUE(value.equal(sharded.at(key))) << key;
  }
}

TEST_P(FsdpWorldOfOne, ACheckpointMovesBetweenDdpFsdpAndOneProcess) {
  auto [net, bare] = twins<Net>(3);
  // DDP trains a step and saves its state dict as a file ("module." keys, as Python's).
  dist::DistributedDataParallel ddp(bare);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  torch::mse_loss(ddp(torch::ones({4, 13}).to(device())), torch::zeros({4, 5}).to(device()))
      .backward();
  opt.step();
  const auto path = store_.string() + ".ddp.pt";
  modhooks::save(modhooks::state_dict(ddp), path);
  // The sharded model loads it, and its full state dict loads into one process's model.
  modhooks::StateDict loaded = modhooks::load(path);
  std::filesystem::remove(path);
  dist::consume_prefix_in_state_dict_if_present(loaded, "module.");
  shard(net);
  dist::set_model_state_dict(net, loaded, dist::StateDictOptions().full_state_dict(true));
  Net plain;
  modhooks::load_state_dict(
      plain, dist::get_model_state_dict(
                 net, dist::StateDictOptions().full_state_dict(true).cpu_offload(true)));
  for (const auto& [key, value] : modhooks::state_dict(bare)) {
    EXPECT_TRUE(modhooks::state_dict(plain).at(key).equal(value.cpu())) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FsdpWorldOfOne, ::testing::Values("gloo", "nccl"),
                         [](const auto& info) { return info.param; });

/// The errors, on the CPU: each names what went wrong and leaves the model as it was.
class FsdpErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::filesystem::temp_directory_path() /
             ("modhooks_fsdp_errors_" + std::to_string(::getpid()));
    std::filesystem::remove(store_);
    dist::init_process_group(dist::InitOptions()
                                 .backend("gloo")
                                 .init_method("file://" + store_.string())
                                 .rank(0)
                                 .world_size(1));
  }
  void TearDown() override {
    dist::destroy_process_group();
    std::filesystem::remove(store_);
  }
  std::filesystem::path store_;
};

/// Every parameter of `module`, by name, as the tensor its table holds.
std::vector<std::pair<std::string, at::Tensor>> parameters(torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

TEST_F(FsdpErrors, ARefusedCallLeavesTheModelAsItWas) {
  Net net;
  // A parameter in another dtype than the group's others: refused before any is sharded.
  net->head->bias.set_data(net->head->bias.to(at::kDouble));
  const auto before = parameters(*net);
  EXPECT_EQ(error_id([&] { dist::fully_shard(net->head); }), "dist.fsdp.mixed_dtypes");
  const auto after = parameters(*net);
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(after[i].second.is_same(before[i].second)) << before[i].first;
  }
  EXPECT_GT(net->head->weight.storage().nbytes(), 0U);
  // Sharding the rest works, and then the root refuses to take the odd bias into its group.
  dist::fully_shard(net->block0);
  EXPECT_EQ(error_id([&] { dist::fully_shard(net); }), "dist.fsdp.mixed_dtypes");
}

TEST_F(FsdpErrors, EachMisuseNamesItself) {
  Net net;
  dist::fully_shard(net->block0);
  EXPECT_EQ(error_id([&] { dist::fully_shard(net->block0); }), "dist.fsdp.twice");

  BlockImpl on_stack(4, 4);
  EXPECT_EQ(error_id([&] { dist::fully_shard(on_stack); }), "dist.fsdp.not_shared");

  auto scalar = std::make_shared<torch::nn::Module>();
  scalar->register_parameter("s", torch::ones({}));
  EXPECT_EQ(error_id([&] { dist::fully_shard(scalar); }), "dist.fsdp.scalar_parameter");

  // A sharded submodule run before the root ever ran: the root cannot take it in afterwards.
  Net early;
  dist::fully_shard(early->block0);
  dist::fully_shard(early);
  modhooks::call(early->block0, torch::ones({2, 13}));
  EXPECT_EQ(error_id([&] {
              modhooks::call(early, torch::ones({2, 13}));
            }),
            "dist.fsdp.root_not_first");

  Net changed;
  dist::fully_shard(changed->block0);
  dist::fully_shard(changed);
  changed->block0->a->register_parameter("extra", torch::ones({3}));
  EXPECT_EQ(error_id([&] {
              modhooks::call(changed, torch::ones({2, 13}));
            }),
            "dist.fsdp.module_changed");
}

TEST_F(FsdpErrors, AStateDictThatDoesNotFitIsRefusedBeforeAnyWrite) {
  Net net;
  shard(net);
  modhooks::StateDict full =
      dist::get_model_state_dict(net, dist::StateDictOptions().full_state_dict(true));
  const at::Tensor before = net->named_parameters()["head.weight"].clone();
  modhooks::StateDict missing = full;
  missing.erase("block1.b.bias");
  missing.insert_or_assign("head.weight", full.at("head.weight") + 7);
  const auto options = dist::StateDictOptions().full_state_dict(true);
  EXPECT_EQ(error_id([&] { dist::set_model_state_dict(net, missing, options); }),
            "dist.fsdp.state_dict_keys");
  EXPECT_TRUE(net->named_parameters()["head.weight"].equal(before));
  modhooks::StateDict wrong = full;
  wrong.insert_or_assign("block1.b.bias", torch::zeros({3}));
  EXPECT_EQ(error_id([&] { dist::set_model_state_dict(net, wrong, options); }),
            "dist.fsdp.state_dict_shape");
  EXPECT_EQ(error_id([&] {
              dist::set_model_state_dict(net, full,
                                         dist::StateDictOptions().broadcast_from_rank0(true));
            }),
            "dist.fsdp.broadcast_needs_full");
}

}  // namespace
