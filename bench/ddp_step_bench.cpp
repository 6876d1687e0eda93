// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ ranks of bench/ddp_step_bench.py (which alternates them with Python DDP ranks of the
// same model and prints both):
//   torchrun --no-python --standalone --nproc-per-node 2 ./ddp_step_bench <steps> <rounds>
// Times a training step (forward, MSE loss, backward, SGD step, zero_grad) of an MLP
// 256-1024-1024-10, batch 64, one intra-op thread per rank, with modhooks::dist's
// DistributedDataParallel and, as the baseline, the same step of an identical model without DDP
// in the same process. Each round runs `steps` steps of one then `steps` of the other (the order
// flips every round) after one warm-up round; rank 0 prints one JSON line of milliseconds per
// step, the median over rounds of each.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rounds.h"

namespace dist = modhooks::dist;

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(256, 1024));
    fc2 = register_module("fc2", torch::nn::Linear(1024, 1024));
    fc3 = register_module("fc3", torch::nn::Linear(1024, 10));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(fc1, x));
    h = torch::relu(modhooks::call(fc2, h));
    return modhooks::call(fc3, h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace

int main(int argc, char** argv) {
  const auto [steps, rounds] = bench::start(argc, argv, "ddp_step_bench");
  const int rank = dist::get_rank();

  torch::manual_seed(0);
  Mlp local_net, ddp_net;
  dist::DistributedDataParallel ddp(ddp_net);
  torch::optim::SGD local_opt(local_net->parameters(), torch::optim::SGDOptions(0.01));
  torch::optim::SGD ddp_opt(ddp.parameters(), torch::optim::SGDOptions(0.01));
  torch::manual_seed(1 + rank);
  const at::Tensor x = torch::randn({64, 256}), y = torch::randn({64, 10});

  auto local_step = [&] {
    torch::mse_loss(modhooks::call(local_net, x), y).backward();
    local_opt.step();
    local_opt.zero_grad();
  };
  auto ddp_step = [&] {
    torch::mse_loss(ddp(x), y).backward();
    ddp_opt.step();
    ddp.zero_grad();
  };
  auto [local_ms, ddp_ms] = bench::alternate(local_step, ddp_step, steps, rounds);
  if (rank == 0) {
    std::printf(
        "{\"impl\": \"modhooks C++\", \"world\": %d, \"steps\": %d, \"rounds\": %d, "
        "\"local_ms\": %.4f, \"ddp_ms\": %.4f}\n",
        dist::get_world_size(), steps, rounds, bench::median(local_ms), bench::median(ddp_ms));
    std::fflush(stdout);
  }
  dist::barrier();
  dist::destroy_process_group();
  return 0;
}
