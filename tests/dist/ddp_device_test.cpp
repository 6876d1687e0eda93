// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// DistributedDataParallel in a world of one process, over Gloo (CPU tensors) and over NCCL (CUDA
// tensors, where there is a GPU: NCCL refuses two ranks on one device). With one rank the
// averaged gradient is the rank's own, so DDP must train exactly as the bare model does; a comm
// hook that counts its buckets and all-reduces them through the group shows the gradients went
// through the backend.
#include <gtest/gtest.h>
#include <modhooks/dist.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "world_of_one.h"

namespace dist = modhooks::dist;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 64))),
        fc3(register_module("fc3", torch::nn::Linear(64, 4))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(fc1, x));
    h = torch::relu(modhooks::call(fc2, h));
    return modhooks::call(fc3, h);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Net);

class DdpWorldOfOne : public WorldOfOne {};

TEST_P(DdpWorldOfOne, TrainsAsTheBareModelWithItsGradientsThroughTheBackend) {
  EXPECT_EQ(dist::get_world_size(), 1);
  auto [net, bare] = twins<Net>(7);

  // 0.01 MB buckets: after the first step (one bucket, as in Python) several a step.
  dist::DistributedDataParallel ddp(net, dist::DDPOptions().bucket_cap_mb(0.01));
  auto group = ddp.process_group();
  int buckets = 0;
  ddp.register_comm_hook([group, &buckets](c10d::GradBucket& bucket) {
    ++buckets;
    std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(group->getSize())};
    return group->allreduce(tensors)->getFuture();
  });

  torch::optim::SGD ddp_opt(ddp.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD bare_opt(bare->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  constexpr int kSteps = 4;
  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor x = torch::randn({8, 16}).to(device());
    const at::Tensor y = torch::randn({8, 4}).to(device());
    ddp_opt.zero_grad();
    (ddp(x) - y).pow(2).mean().backward();
    ddp_opt.step();
    bare_opt.zero_grad();
    (bare->forward(x) - y).pow(2).mean().backward();
    EXPECT_GT(bare->fc1->weight.grad().abs().sum().item<double>(), 0.0);
    bare_opt.step();
  }
  EXPECT_GE(buckets, kSteps) << "the comm hook saw " << buckets << " buckets in " << kSteps
                             << " steps";
  // The state dict's names carry DDP's "module." prefix.
  const modhooks::StateDict trained = modhooks::state_dict(ddp);
  for (const auto& [key, value] : modhooks::state_dict(bare)) {
    ASSERT_TRUE(trained.contains("module." + key)) << key;
    const at::Tensor ours = trained.find("module." + key)->second;
    EXPECT_EQ(ours.device(), device()) << key;
    EXPECT_TRUE(torch::allclose(ours, value, /*rtol=*/1e-5, /*atol=*/1e-6))
        << key << ": differs from the bare model by " << (ours - value).abs().max().item<double>();
  }
}

/// What models return beside tensors, as Python's DDP takes them: an undefined tensor (libtorch's
/// MultiheadAttention without weights; Python's None), and tensors only inside an optional and a
/// map, which DDP must find to see which parameters the loss uses.
struct OutputsImpl : torch::nn::Module {
  OutputsImpl()
      : fc(register_module("fc", torch::nn::Linear(4, 3))),
        idle(register_module("idle", torch::nn::Linear(4, 3))) {}
  std::tuple<at::Tensor, std::optional<at::Tensor>, std::unordered_map<std::string, at::Tensor>>
  forward(const at::Tensor& x) {
    const at::Tensor y = modhooks::call(fc, x);
    return {at::Tensor(), y * 2, {{"y", y * 3}}};
  }
  torch::nn::Linear fc, idle;  // idle: never used, so find_unused_parameters has work
};
TORCH_MODULE(Outputs);

at::Tensor loss_of(const std::tuple<at::Tensor, std::optional<at::Tensor>,
                                    std::unordered_map<std::string, at::Tensor>>& out) {
  return std::get<1>(out)->sum() + std::get<2>(out).at("y").pow(2).sum();
}

TEST_P(DdpWorldOfOne, FindsTheTensorsOfOutputsAsModelsReturnThem) {
  // find_unused_parameters walks the graph back from the tensors it finds in the output.
  auto [net, bare] = twins<Outputs>(3);
  dist::DistributedDataParallel ddp(net, dist::DDPOptions().find_unused_parameters(true));
  const at::Tensor x = torch::randn({5, 4}, device());
  for (int step = 0; step < 2; ++step) {
    ddp.zero_grad();
    bare->zero_grad();
    const auto out = ddp.forward(x);
    EXPECT_FALSE(std::get<0>(out).defined());
    loss_of(out).backward();
    loss_of(bare->forward(x)).backward();
    for (const auto& item : bare->named_parameters()) {
      const std::string& name = item.key();
      const at::Tensor& p = item.value();
      const at::Tensor got = net->named_parameters()[name].grad();
      if (name.rfind("idle.", 0) == 0) {
        EXPECT_TRUE(!got.defined() || got.eq(0).all().item<bool>()) << name;
      } else {
        ASSERT_TRUE(got.defined()) << name;
        EXPECT_TRUE(got.equal(p.grad())) << name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DdpWorldOfOne, ::testing::Values("gloo", "nccl"),
                         [](const auto& info) { return info.param; });

}  // namespace
