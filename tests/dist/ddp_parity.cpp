// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ ranks of the DDP parity runs (tests/python/ddp_parity.py starts them under
// `torchrun --no-python`, and the same training under Python's DDP):
//   ddp_parity <dir> <mode>...
// For each mode in turn, in one process group, trains a fresh model on this rank's shard of
// <dir>/<mode>/data.pt from <dir>/<mode>/init.pt and has rank 0 save `state_dict(ddp)` to
// <dir>/<mode>/cpp.pt. One launch runs every mode: starting torchrun and libtorch costs far more
// than 24 steps of this model. Each mode prints "mode <m>: done" or "mode <m>: FAILED ..." so a
// failure names its mode. Error modes check that every rank (every surviving rank, when one
// dies) raises modhooks::Error.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rank_modes.h"

namespace dist = modhooks::dist;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl(bool bn, bool extra, int64_t hidden = 32) {
    fc1 = register_module("fc1", torch::nn::Linear(16, hidden));
    if (bn) norm = register_module("bn", torch::nn::BatchNorm1d(hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 4));
    if (extra) unused = register_module("extra", torch::nn::Linear(32, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::relu(modhooks::call(fc1, x));
    if (norm) h = modhooks::call(norm, h);
    h = torch::relu(modhooks::call(fc2, h));
    return modhooks::call(fc3, h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};
TORCH_MODULE(Net);

using rank_modes::expect_error;
using rank_modes::Failure;

/// One parity mode: the training tests/python/ddp_parity.py's `train` does under Python's DDP.
void train(const std::string& mode, const std::string& dir) {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const bool bn = mode == "batchnorm", extra = mode == "find_unused";
  Net net(bn, extra);
  modhooks::load_state_dict(net, modhooks::load(dir + "/init.pt"));
  {
    // Ranks start apart: DDP must broadcast rank 0's parameters.
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(rank * 0.01);
  }
  int fc2_calls = 0;
  auto handle = modhooks::register_forward_hook(
      net->fc2, [&](auto&, const auto&, const auto&) { ++fc2_calls; });

  dist::DDPOptions options;
  if (mode == "find_unused") options.find_unused_parameters(true);
  if (mode == "static_graph") options.static_graph(true);
  if (mode == "bucket_view") options.gradient_as_bucket_view(true).bucket_cap_mb(0.002);
  dist::DistributedDataParallel ddp(net, options);
  if (mode == "fp16") ddp.register_comm_hook(dist::comm_hooks::fp16_compress());
  if (mode == "bf16") ddp.register_comm_hook(dist::comm_hooks::bf16_compress());
  if (mode == "allreduce_hook") ddp.register_comm_hook(dist::comm_hooks::allreduce());
  if (mode == "cpp_hook" || mode == "skip_allreduce") {
    auto group = ddp.process_group();
    const bool skip = mode == "skip_allreduce";
    ddp.register_comm_hook([group, world, skip](c10d::GradBucket& bucket) {
      // Halves the mean gradient; skip_allreduce keeps the local one (the parity run must fail).
      at::Tensor t = bucket.getBufferRef().div_(2 * world);
      if (skip) {
        auto done = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
        done->markCompleted(t);
        return done;
      }
      std::vector<at::Tensor> tensors{t};
      return group->allreduce(tensors)->getFuture();
    });
  }

  modhooks::StateDict data = modhooks::load(dir + "/data.pt");
  const int steps = static_cast<int>(data.at("steps").item<int64_t>());
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto batch = [&](int step) {
    std::string key = std::to_string(rank) + "." + std::to_string(step);
    return std::make_pair(data.at("x." + key), data.at("y." + key));
  };
  for (int step = 0; step < steps; ++step) {
    if (mode == "no_sync") {
      // Two micro-batches a step: the first accumulates locally.
      {
        auto guard = ddp.no_sync();
        auto [x, y] = batch(2 * step);
        (ddp(x) - y).pow(2).mean().backward();
      }
      auto [x, y] = batch(2 * step + 1);
      (ddp(x) - y).pow(2).mean().backward();
    } else {
      auto [x, y] = batch(step);
      (ddp(x) - y).pow(2).mean().backward();
    }
    opt.step();
    if (mode == "bucket_view") {
      ddp.zero_grad(/*set_to_none=*/false);
    } else {
      ddp.zero_grad();
    }
  }
  if (mode == "default") {
    // modhooks' default reduction took the Reducer's one hook at the first forward.
    expect_error("dist.comm_hook.registered_too_late",
                 [&] { ddp.register_comm_hook(dist::comm_hooks::allreduce()); });
  }
  const int expected_calls = mode == "no_sync" ? 2 * steps : steps;
  if (fc2_calls != expected_calls) {
    throw Failure("fc2's forward hook fired " + std::to_string(fc2_calls) + " times, expected " +
                  std::to_string(expected_calls));
  }
  if (rank == 0) {
    modhooks::StateDict sd = modhooks::state_dict(ddp);
    if (sd.keys().front().rfind("module.", 0) != 0)
      throw Failure("state_dict(ddp) lacks 'module.'");
    modhooks::save(sd, dir + "/cpp.pt");
  }
}

void run(const std::string& mode, const std::string& dir) {
  if (mode == "error_mismatch") {
    Net net(false, false, dist::get_rank() == 1 ? 24 : 32);
    expect_error("dist.ddp.model_mismatch", [&] { dist::DistributedDataParallel ddp(net); });
  } else if (mode == "error_unused") {
    Net net(false, true);
    dist::DistributedDataParallel ddp(net);
    expect_error("dist.reducer.unused_parameters", [&] {
      for (int step = 0; step < 2; ++step) ddp(torch::ones({2, 16})).sum().backward();
    });
  } else if (mode == "error_peer_died") {
    // The last rank dies in the middle of a step's backward (fc3's full backward hook runs
    // before fc1's gradients exist); the others' backward must raise modhooks::Error, within the
    // group's timeout at worst, rather than hang or let the backend's exception through.
    const int last = dist::get_world_size() - 1;
    Net net(false, false);
    int step = 0;
    auto handle =
        modhooks::register_full_backward_hook(net->fc3, [&](auto&, const auto&, const auto&) {
          if (dist::get_rank() == last && step == 2) {
            std::cout << "rank " << last << " exits during backward" << std::endl;
            std::_Exit(0);  // no destructors, no goodbye: its sockets just close
          }
        });
    dist::DistributedDataParallel ddp(net);
    expect_error("dist.backward.reduction_failed", [&] {
      for (step = 0; step < 4; ++step) ddp(torch::ones({2, 16})).sum().backward();
    });
  } else {
    train(mode, dir + "/" + mode);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return rank_modes::main_over_modes(argc, argv, "ddp_parity", run);
}
