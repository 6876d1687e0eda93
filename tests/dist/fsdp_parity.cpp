// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ ranks of the fully_shard parity runs (tests/python/fsdp_parity.py starts them under
// `torchrun --no-python`, and the same training under Python's FSDP2):
//   fsdp_parity <dir> <mode>...
// For each mode in turn, in one process group, builds the mode's model, shards it as the Python
// twin does, trains it 10 steps on this rank's batches of <dir>/<mode>/data.pt and saves each
// rank's shards (`named_parameters()` after fully_shard) to <dir>/<mode>/cpp.<rank>.pt and, on
// rank 0, the full state dict to <dir>/<mode>/cpp_full.pt. Each mode prints "mode <m>: done" or
// "mode <m>: FAILED ..." so a failure names its mode. Error modes check that every rank (every
// surviving rank, when one dies) raises modhooks::Error.
#include <modhooks/dist.h>
#include <modhooks/optim/adam.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rank_modes.h"

namespace dist = modhooks::dist;

namespace {

/// fc1=Linear(13,32), fc2=Linear(32,17), fc3=Linear(17,out): Python's `Net`.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t out = 5, int64_t hidden = 32) {
    fc1 = register_module("fc1", torch::nn::Linear(13, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 17));
    fc3 = register_module("fc3", torch::nn::Linear(17, out));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(fc1, x));
    h = torch::relu(modhooks::call(fc2, h));
    return modhooks::call(fc3, h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Net);

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out) {
    a = register_module("a", torch::nn::Linear(in, 24));
    b = register_module("b", torch::nn::Linear(24, out));
  }
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(b, torch::relu(modhooks::call(a, x)));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(Block);

/// Python's `Net2`: two blocks and a head that the root's group holds.
struct Net2Impl : torch::nn::Module {
  Net2Impl() {
    block0 = register_module("block0", Block(13, 16));
    block1 = register_module("block1", Block(16, 16));
    head = register_module("head", torch::nn::Linear(16, 5));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(block0, x));
    h = torch::relu(modhooks::call(block1, h));
    return modhooks::call(head, h);
  }
  Block block0{nullptr}, block1{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net2);

/// Python's `NetTwice`: fc2 runs twice in each forward.
struct NetTwiceImpl : torch::nn::Module {
  NetTwiceImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(13, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 16));
    fc3 = register_module("fc3", torch::nn::Linear(16, 5));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(fc1, x));
    h = torch::relu(modhooks::call(fc2, h));
    h = torch::relu(modhooks::call(fc2, h));
    return modhooks::call(fc3, h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(NetTwice);

using rank_modes::expect_error;
using rank_modes::Failure;

/// A model of a mode, sharded as its Python twin shards it.
struct Model {
  std::shared_ptr<torch::nn::Module> root;
  std::function<at::Tensor(const at::Tensor&)> forward;
};

Model build(const std::string& mode, const modhooks::StateDict* init) {
  dist::FullyShardOptions options;
  if (mode == "no_reshard") options.reshard_after_forward(false);
  if (mode == "reshard_root") options.reshard_after_forward(true);
  if (mode == "mp") {
    options.mp_policy(
        dist::MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat));
  }
  if (mode == "mp_accum")
    options.mp_policy(dist::MixedPrecisionPolicy().param_dtype(at::kBFloat16));
  auto load = [&](auto& net) {
    if (init != nullptr) modhooks::load_state_dict(net, *init);
  };
  if (mode == "nested" || mode == "reshard_root") {
    // reshard_root: the root's group (head) is freed after forward and gathered again.
    Net2 net;
    load(net);
    dist::fully_shard(net->block0, options);
    dist::fully_shard(net->block1, options);
    dist::fully_shard(net, options);
    return {net.ptr(), [net](const at::Tensor& x) { return modhooks::call(net, x); }};
  }
  if (mode == "twice") {
    NetTwice net;
    load(net);
    for (auto* fc : {&net->fc1, &net->fc2, &net->fc3}) dist::fully_shard(*fc, options);
    dist::fully_shard(net, options);
    return {net.ptr(), [net](const at::Tensor& x) { return modhooks::call(net, x); }};
  }
  Net net(mode == "uneven" ? 4 : 5);
  load(net);
  // A user's hook registered before fully_shard sees the whole parameters; one registered after
  // runs after the group freed them (Python's order of forward hooks).
  auto before =
      modhooks::register_forward_hook(net->fc2, [](torch::nn::Module& m, const auto&, const auto&) {
        const at::Tensor& w = static_cast<torch::nn::LinearImpl&>(m).weight;
        if (w.sizes() != c10::IntArrayRef{17, 32} || w.storage().nbytes() == 0 ||
            !w.isfinite().all().item<bool>()) {
          throw Failure("a hook registered before fully_shard did not see the whole weight");
        }
      });
  for (auto* fc : {&net->fc1, &net->fc2, &net->fc3}) dist::fully_shard(*fc, options);
  dist::fully_shard(net, options);
  if (mode == "mlp") {
    auto after = modhooks::register_forward_hook(
        net->fc2, [](torch::nn::Module& m, const auto&, const auto&) {
          const at::Tensor& w = static_cast<torch::nn::LinearImpl&>(m).weight;
          if (w.size(0) == 17 || !w.is_same(m.named_parameters(false)["weight"])) {
            throw Failure("a hook registered after fully_shard ran before the reshard");
          }
        });
  }
  return {net.ptr(), [net](const at::Tensor& x) { return modhooks::call(net, x); }};
}

void train(const std::string& mode, const std::string& dir) {
  const int rank = dist::get_rank();
  modhooks::StateDict init = modhooks::load(dir + "/init.pt");
  Model model = build(mode, mode == "state_dict" ? nullptr : &init);
  if (mode == "state_dict") {
    // Rank 0 reads the file; the others receive its tensors.
    dist::set_model_state_dict(
        model.root, rank == 0 ? init : modhooks::StateDict(),
        dist::StateDictOptions().full_state_dict(true).broadcast_from_rank0(true));
  }
  modhooks::StateDict data = modhooks::load(dir + "/data.pt");
  const int steps = static_cast<int>(data.at("steps").item<int64_t>());
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (mode == "adam") {
    opt = std::make_unique<modhooks::optim::Adam>(model.root->parameters(),
                                                  torch::optim::AdamOptions(0.01));
  } else {
    opt = std::make_unique<torch::optim::SGD>(model.root->parameters(),
                                              torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  auto step_on = [&](int k) {
    std::string key = std::to_string(rank) + "." + std::to_string(k);
    torch::mse_loss(model.forward(data.at("x." + key)).to(at::kFloat), data.at("y." + key))
        .backward();
  };
  for (int step = 0; step < steps; ++step) {
    if (mode == "accum" || mode == "mp_accum") {
      dist::set_requires_gradient_sync(model.root, false);
      step_on(2 * step);
      dist::set_requires_gradient_sync(model.root, true);
      step_on(2 * step + 1);
    } else {
      step_on(step);
    }
    opt->step();
    dist::zero_grad(model.root);
    // Between steps each layer's member is its shard (Python's `module.weight`), and reads.
    for (const auto& m : model.root->modules()) {
      auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get());
      if (linear == nullptr) continue;
      if (!linear->weight.is_same(linear->named_parameters(false)["weight"]) ||
          !linear->weight.isfinite().all().item<bool>()) {
        throw Failure("a layer's member is not its shard between steps");
      }
    }
  }
  modhooks::StateDict shards;
  for (const auto& item : model.root->named_parameters()) {
    shards.insert_or_assign(item.key(), item.value().detach().clone());
  }
  modhooks::save(shards, dir + "/cpp." + std::to_string(rank) + ".pt");
  modhooks::StateDict full = dist::get_model_state_dict(
      model.root, dist::StateDictOptions().full_state_dict(true).cpu_offload(true));
  if (rank == 0) {
    modhooks::save(full, dir + "/cpp_full.pt");
  } else if (!full.empty()) {
    throw Failure("cpu_offload: a rank other than 0 got a full state dict");
  }
}

void run(const std::string& mode, const std::string& dir) {
  if (mode == "error_mismatch") {
    Net net(5, dist::get_rank() == 1 ? 24 : 32);
    expect_error("dist.fsdp.model_mismatch", [&] { dist::fully_shard(net->fc1); });
  } else if (mode == "error_twice") {
    Net net;
    dist::fully_shard(net->fc1);
    expect_error("dist.fsdp.twice", "fully_shard was already called",
                 [&] { dist::fully_shard(net->fc1); });
  } else if (mode == "error_changed") {
    Net net;
    dist::fully_shard(net->fc1);
    dist::fully_shard(net);
    net->fc1->register_parameter("extra", torch::ones({2}));
    expect_error("dist.fsdp.module_changed", "changed after fully_shard", [&] {
      modhooks::call(net, torch::ones({2, 13}));
    });
  } else if (mode == "error_peer_died") {
    // The last rank dies in the middle of a step's backward (fc3's full backward hook runs
    // before fc1's gradients are reduced); the others must raise modhooks::Error rather than
    // hang or let the backend's exception through.
    const int last = dist::get_world_size() - 1;
    Net net;
    int step = 0;
    auto handle =
        modhooks::register_full_backward_hook(net->fc3, [&](auto&, const auto&, const auto&) {
          if (dist::get_rank() == last && step == 2) {
            std::cout << "rank " << last << " exits during backward" << std::endl;
            std::_Exit(0);
          }
        });
    for (auto* fc : {&net->fc1, &net->fc2, &net->fc3}) dist::fully_shard(*fc);
    dist::fully_shard(net);
    expect_error("dist.", [&] {
      for (step = 0; step < 4; ++step) modhooks::call(net, torch::ones({2, 13})).sum().backward();
    });
  } else {
    train(mode, dir + "/" + mode);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return rank_modes::main_over_modes(argc, argv, "fsdp_parity", run);
}
