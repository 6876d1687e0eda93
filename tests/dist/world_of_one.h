// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// A process group of one process for GoogleTest cases, over the backend the case is
// instantiated with: "gloo" (CPU tensors) or "nccl" (CUDA tensors; the case skips without a GPU
// or without NCCL in modhooks::dist, and NCCL refuses two ranks on one device).
#pragma once

#include <gtest/gtest.h>
#include <modhooks/dist.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

class WorldOfOne : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    namespace dist = modhooks::dist;
    if (backend() == "nccl") {
      if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
      if (!dist::is_nccl_available()) GTEST_SKIP() << "NCCL is not compiled into modhooks::dist";
    }
    store_ = std::filesystem::temp_directory_path() /
             ("modhooks_world_of_one_" + backend() + "_" + std::to_string(::getpid()));
    std::filesystem::remove(store_);
    dist::init_process_group(dist::InitOptions()
                                 .backend(backend())
                                 .init_method("file://" + store_.string())
                                 .rank(0)
                                 .world_size(1)
                                 .timeout(std::chrono::milliseconds(120000)));
  }
  void TearDown() override {
    if (modhooks::dist::is_initialized()) modhooks::dist::destroy_process_group();
    std::filesystem::remove(store_);
  }
  std::string backend() const { return GetParam(); }
  at::Device device() const {
    return backend() == "nccl" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  }
  /// A model and a bare copy of it with the same weights, both on the backend's device.
  template <class Holder>
  std::pair<Holder, Holder> twins(std::uint64_t seed) const {
    torch::manual_seed(seed);
    Holder net;
    Holder bare;
    modhooks::load_state_dict(bare, modhooks::state_dict(net));
    net->to(device());
    bare->to(device());
    return {net, bare};
  }
  std::filesystem::path store_;
};
