// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Training a C++ model too large for one process (here a small stand-in) sharded as Python's
// FSDP2 `fully_shard` shards it: each rank keeps a dim-0 shard of every parameter
// (`torch.chunk(p, world)[rank]`), a block's whole parameters exist only while its forward and
// backward run (one all-gather each), and gradients are reduce-scattered onto the shards that the
// optimizer trains. fsdp_train.py trains the same model from the same weights on the same batches
// with Python's `fully_shard`, and its compare finds every rank's shards, and the full state
// dict, equal bitwise:
//
//   python fsdp_train.py python DIR     # DIR/init.pt and data.pt, then Python's run on 2 ranks
//   torchrun --no-python --standalone --nproc-per-node 2 ./fsdp_train DIR
//   python fsdp_train.py compare DIR    # prints the verdict
//
// Each rank saves its shards, {name: tensor}, to DIR/cpp.<rank>.pt; rank 0 the full state dict
// (gathered from the shards) to DIR/cpp_full.pt.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace dist = modhooks::dist;

// fsdp_train.py's Block: x + b(relu(a(x))).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) {
    a = register_module("a", torch::nn::Linear(width, 4 * width));
    b = register_module("b", torch::nn::Linear(4 * width, width));
  }
  at::Tensor forward(const at::Tensor& x) {
    return x + modhooks::call(b, torch::relu(modhooks::call(a, x)));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(Block);

// fsdp_train.py's Net: three Blocks in a ModuleList (keys blocks.0.a.weight, ...) and a head.
struct NetImpl : torch::nn::Module {
  NetImpl(int64_t width, int64_t out) {
    auto list = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) {
      blocks.emplace_back(width);
      list->push_back(blocks.back());
    }
    head = register_module("head", torch::nn::Linear(width, out));
  }
  at::Tensor forward(at::Tensor h) {
    // Through modhooks::call: the hooks fully_shard put on each block gather its parameters.
    for (auto& block : blocks) h = modhooks::call(block, h);
    return modhooks::call(head, h);
  }
  std::vector<Block> blocks;  // the ModuleList's children, typed
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torchrun --no-python --standalone --nproc-per-node 2 ./fsdp_train DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  dist::init_process_group(dist::InitOptions().backend("gloo"));
  const int rank = dist::get_rank(), world = dist::get_world_size();

  Net net(64, 5);
  const modhooks::StateDict init = modhooks::load(dir + "/init.pt");
  modhooks::load_state_dict(net, init);  // Python's initial weights, before sharding
  for (auto& block : net->blocks) dist::fully_shard(block);  // a group per block, bottom-up
  dist::fully_shard(net);                                    // the root's group: head

  // From here on net->parameters() are this rank's shards, what the optimizer trains; a member
  // such as net->blocks[0]->a->weight holds the whole tensor only while its block runs.
  const auto shards = net->named_parameters();
  int64_t held = 0, whole = 0;
  for (const auto& p : shards) {
    held += p.value().numel();
    whole += init.at(p.key()).numel();
  }
  auto shard_of = [&](const std::string& name) {
    std::ostringstream s;
    s << name << " " << shards[name].sizes() << " of " << init.at(name).sizes();
    return s.str();
  };
  for (int r = 0; r < world; ++r) {  // in rank order
    if (r == rank) {
      std::cout << "rank " << rank << " holds " << held << " of " << whole
                << " parameters: " << shard_of("blocks.0.a.weight") << ", "
                << shard_of("head.weight") << std::endl;
    }
    dist::barrier();
  }

  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const modhooks::StateDict data = modhooks::load(dir + "/data.pt");
  const at::Tensor x = data.at("x")[rank], y = data.at("y")[rank];  // this rank's batches
  for (int64_t step = 0; step < x.size(0); ++step) {
    at::Tensor loss = torch::mse_loss(modhooks::call(net, x[step]), y[step]);
    loss.backward();
    opt.step();
    dist::zero_grad(net);
    if (rank == 0) {
      std::cout << "C++ step " << step + 1 << ": loss " << std::fixed << std::setprecision(6)
                << loss.item<double>() << std::endl;
    }
  }

  modhooks::StateDict trained;  // this rank's shards, after training
  for (const auto& p : net->named_parameters()) {
    trained.insert_or_assign(p.key(), p.value().detach().clone());
  }
  modhooks::save(trained, dir + "/cpp." + std::to_string(rank) + ".pt");
  // Every rank takes part in the gather; with cpu_offload only rank 0 gets the tensors.
  modhooks::StateDict full = dist::get_model_state_dict(
      net, dist::StateDictOptions().full_state_dict(true).cpu_offload(true));
  if (rank == 0) {
    modhooks::save(full, dir + "/cpp_full.pt");
    std::cout << "saved " << dir << "/cpp.<rank>.pt and " << dir << "/cpp_full.pt" << std::endl;
  }
  dist::barrier();
  dist::destroy_process_group();
}
