// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ ranks of bench/fsdp_step_bench.py (which alternates them with Python fully_shard
// ranks of the same model and prints both):
//   torchrun --no-python --standalone --nproc-per-node 2 ./fsdp_step_bench <steps> <rounds>
// The model: Linear(13,512), ReLU, 7 x (Linear(512,512), ReLU), Linear(512,5) (1,848,325
// parameters, 7,393,300 bytes), batch 64 x 13 per rank, MSE loss, SGD(0.01, momentum 0.9), one
// intra-op thread per rank. Two copies in each process: one with every Linear and then the root
// sharded by modhooks::dist::fully_shard (default options), and, as the baseline, one unsharded
// and trained by this process alone.
//
// Time: each round runs `steps` steps of one then `steps` of the other (the order flips every
// round) after one warm-up round; the median over rounds of each, in ms per step.
// Memory, from bench/cpu_memory.cpp's counter of live CPU allocator bytes (linked in, so it
// counts from start-up), for each copy after the timed rounds:
//   model_bytes   live bytes the model added when it was built (and sharded): its parameters
//   shard_bytes   bytes of the storages of `parameters()` (for FSDP the padded shards)
//   step_extra    peak live bytes during one step (forward, backward, SGD step, zero_grad) minus
//                 the live bytes just before it: what a step needs beside the model and the
//                 optimizer's momentum (activations, gathered parameters, gradients, buffers);
//                 forward_extra, backward_extra, optimizer_extra: the same peak in each phase
//                 (each beside the live bytes before the step)
//   param_extra   the same for a forward of one row under no_grad: the gathered parameters (and
//                 their gather buffers) alone, the activations of one row being ~2 KiB
//   step_left     live bytes after the step minus before it (0 in a steady state)
// Every rank prints one JSON line of its figures.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

#include "cpu_memory.h"
#include "rounds.h"

namespace dist = modhooks::dist;

namespace {

constexpr int kHidden = 512, kLayers = 9;

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    for (int i = 0; i < kLayers; ++i) {
      const int in = i == 0 ? 13 : kHidden, out = i == kLayers - 1 ? 5 : kHidden;
      fc.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(in, out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (int i = 0; i < kLayers - 1; ++i) h = torch::relu(modhooks::call(fc[i], h));
    return modhooks::call(fc.back(), h);
  }
  std::vector<torch::nn::Linear> fc;
};
TORCH_MODULE(Mlp);

/// Bytes of the distinct storages behind `module->parameters()`.
int64_t storage_bytes(torch::nn::Module& module) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const at::Tensor& p : module.parameters()) {
    if (seen.insert(p.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<int64_t>(p.storage().nbytes());
    }
  }
  return bytes;
}

/// One step's peak live bytes beside those live before it, by phase.
struct StepPeaks {
  int64_t forward = 0;    ///< forward and loss
  int64_t backward = 0;   ///< backward (FSDP: gathers again, reduce-scatters)
  int64_t optimizer = 0;  ///< SGD step and zero_grad
  int64_t left = 0;       ///< live after the step minus before (0 in a steady state)
  int64_t step() const { return std::max({forward, backward, optimizer}); }
};

template <class Loss, class Update>
StepPeaks step_peaks(Loss&& loss_of_forward, Update&& update) {
  using modhooks_bench::cpu_live, modhooks_bench::cpu_peak, modhooks_bench::reset_cpu_peak;
  StepPeaks peaks;
  const int64_t before = cpu_live();
  reset_cpu_peak();
  at::Tensor loss = loss_of_forward();
  peaks.forward = cpu_peak() - before;
  reset_cpu_peak();
  loss.backward();
  peaks.backward = cpu_peak() - before;
  reset_cpu_peak();
  update();
  peaks.optimizer = cpu_peak() - before;
  loss.reset();
  peaks.left = cpu_live() - before;
  return peaks;
}

/// `"name": {...}` of one copy's memory figures.
std::string memory_json(const char* name, int64_t model_bytes, int64_t shard_bytes,
                        int64_t param_extra, const StepPeaks& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"%s\": {\"model_bytes\": %lld, \"shard_bytes\": %lld, \"param_extra\": %lld, "
                "\"step_extra\": %lld, \"forward_extra\": %lld, \"backward_extra\": %lld, "
                "\"optimizer_extra\": %lld, \"step_left\": %lld}",
                name, static_cast<long long>(model_bytes), static_cast<long long>(shard_bytes),
                static_cast<long long>(param_extra), static_cast<long long>(p.step()),
                static_cast<long long>(p.forward), static_cast<long long>(p.backward),
                static_cast<long long>(p.optimizer), static_cast<long long>(p.left));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const auto [steps, rounds] = bench::start(argc, argv, "fsdp_step_bench");
  const int rank = dist::get_rank();

  torch::manual_seed(0);
  int64_t live = modhooks_bench::cpu_live();
  Mlp local_net;
  const int64_t local_model_bytes = modhooks_bench::cpu_live() - live;
  live = modhooks_bench::cpu_live();
  Mlp fsdp_net;
  for (auto& fc : fsdp_net->fc) dist::fully_shard(fc);
  dist::fully_shard(fsdp_net);
  const int64_t fsdp_model_bytes = modhooks_bench::cpu_live() - live;

  const auto options = torch::optim::SGDOptions(0.01).momentum(0.9);
  torch::optim::SGD local_opt(local_net->parameters(), options);
  torch::optim::SGD fsdp_opt(fsdp_net->parameters(), options);
  torch::manual_seed(1 + rank);
  const at::Tensor x = torch::randn({64, 13}), y = torch::randn({64, 5});
  const at::Tensor one_row = torch::randn({1, 13});

  auto local_loss = [&] { return torch::mse_loss(modhooks::call(local_net, x), y); };
  auto local_update = [&] {
    local_opt.step();
    local_opt.zero_grad();
  };
  auto fsdp_loss = [&] { return torch::mse_loss(modhooks::call(fsdp_net, x), y); };
  auto fsdp_update = [&] {
    fsdp_opt.step();
    dist::zero_grad(fsdp_net);
  };
  auto local_step = [&] {
    local_loss().backward();
    local_update();
  };
  auto fsdp_step = [&] {
    fsdp_loss().backward();
    fsdp_update();
  };
  auto [local_ms, fsdp_ms] = bench::alternate(local_step, fsdp_step, steps, rounds);

  dist::barrier();
  const StepPeaks local_peaks = step_peaks(local_loss, local_update);
  const StepPeaks fsdp_peaks = step_peaks(fsdp_loss, fsdp_update);
  int64_t local_param_extra = 0, fsdp_param_extra = 0;
  {
    torch::NoGradGuard no_grad;
    local_param_extra = modhooks_bench::peak_beside([&] { modhooks::call(local_net, one_row); });
    fsdp_param_extra = modhooks_bench::peak_beside([&] { modhooks::call(fsdp_net, one_row); });
  }

  // One write: the ranks share torchrun's stdout.
  std::printf(
      "{\"impl\": \"modhooks C++\", \"rank\": %d, \"world\": %d, \"steps\": %d, "
      "\"rounds\": %d, \"local_ms\": %.4f, \"fsdp_ms\": %.4f, %s, %s}\n",
      rank, dist::get_world_size(), steps, rounds, bench::median(local_ms), bench::median(fsdp_ms),
      memory_json("local", local_model_bytes, storage_bytes(*local_net), local_param_extra,
                  local_peaks)
          .c_str(),
      memory_json("fsdp", fsdp_model_bytes, storage_bytes(*fsdp_net), fsdp_param_extra, fsdp_peaks)
          .c_str());
  std::fflush(stdout);
  dist::barrier();
  dist::destroy_process_group();
  return 0;
}
