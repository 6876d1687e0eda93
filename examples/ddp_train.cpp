// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Data-parallel training with modhooks::dist, started like any PyTorch job:
//   torchrun --no-python --standalone --nproc-per-node 2 ./ddp_train [checkpoint.pt]
// Each rank trains on its own shard; gradients are all-reduced by c10d's Reducer while backward
// runs; a forward hook logs activations and a full backward hook the gradient norm, as without
// DDP; rank 0 saves a checkpoint Python loads with
// `consume_prefix_in_state_dict_if_present(torch.load(path), "module.")`.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <iostream>

namespace dist = modhooks::dist;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(fc2, torch::relu(modhooks::call(fc1, x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "ddp_train.pt";
  dist::init_process_group(dist::InitOptions().backend("gloo"));
  const int rank = dist::get_rank(), world = dist::get_world_size();

  torch::manual_seed(rank);  // ranks start apart: DDP broadcasts rank 0's parameters
  Net net;
  double last_mean = 0;
  auto fwd = modhooks::register_forward_hook(net->fc1, [&](auto&, const auto&, const auto& out) {
    last_mean = out.toTensor().mean().template item<double>();
  });
  double grad_norm = 0;
  auto bwd = modhooks::register_full_backward_hook(
      net->fc2, [&](auto&, const auto& grad_input, const auto&) {
        grad_norm = grad_input[0].defined() ? grad_input[0].norm().template item<double>() : 0;
      });

  dist::DistributedDataParallel ddp(net);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::manual_seed(100 + rank);  // this rank's shard
  const at::Tensor w = torch::arange(1, 9, torch::kFloat) / 8;
  for (int step = 0; step < 50; ++step) {
    at::Tensor x = torch::randn({32, 8});
    at::Tensor y = (x * w).sum(1, true);
    at::Tensor loss = torch::mse_loss(ddp(x), y);
    loss.backward();
    opt.step();
    ddp.zero_grad();
    if (step % 10 == 0 || step == 49) {
      std::cout << "rank " << rank << "/" << world << " step " << step << " loss "
                << loss.item<double>() << " fc1 mean " << last_mean << " |dL/d fc2 input| "
                << grad_norm << "\n";
    }
  }
  if (rank == 0) {
    modhooks::save(modhooks::state_dict(ddp), path);
    std::cout << "rank 0 saved " << path << " (keys start with \"module.\")\n";
  }
  dist::barrier();
  dist::destroy_process_group();
}
