// SPDX-License-Identifier: BSD-3-Clause
// Small modules the suites share (the helpers of Python's test_module_hooks.py).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <stdexcept>
#include <tuple>

#include "modhooks/modhooks.h"

namespace testnets {

/// Python's `Net`: two Sequentials of two Linear(10, 10).
struct NetImpl : torch::nn::Module {
  NetImpl()
      : seq1(register_module(
            "seq1", modhooks::Sequential(torch::nn::Linear(10, 10), torch::nn::Linear(10, 10)))),
        seq2(register_module(
            "seq2", modhooks::Sequential(torch::nn::Linear(10, 10), torch::nn::Linear(10, 10)))) {}
  at::Tensor forward(at::Tensor x) {
    return modhooks::call(seq2, modhooks::call(seq1, std::move(x)));
  }
  modhooks::Sequential seq1, seq2;
};
TORCH_MODULE(Net);

/// Python's `ToyModel`: net1 then net2, returning a 1-tuple.
struct ToyModelImpl : torch::nn::Module {
  ToyModelImpl() : net1(register_module("net1", Net())), net2(register_module("net2", Net())) {}
  std::tuple<at::Tensor> forward(at::Tensor x) {
    return std::make_tuple(modhooks::call(net2, modhooks::call(net1, std::move(x))));
  }
  Net net1, net2;
};
TORCH_MODULE(ToyModel);

/// Forward that raises "failing in forward" unless `fail` is false.
struct FailsImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x, bool fail) {
    if (fail) throw std::runtime_error("failing in forward");
    return x + 1;
  }
};
TORCH_MODULE(Fails);

/// Takes a non-tensor and a tensor, returns (tensor.clone(), non_tensor): test_hook_extra_input.
struct ExtraInputImpl : torch::nn::Module {
  std::tuple<at::Tensor, double> forward(double scale, at::Tensor x) {
    return std::make_tuple(x.clone(), scale);
  }
};
TORCH_MODULE(ExtraInput);

/// Two inputs, two outputs.
struct TwoOutImpl : torch::nn::Module {
  std::tuple<at::Tensor, at::Tensor> forward(at::Tensor a, at::Tensor b) {
    return std::make_tuple(a * b, a + 2 * b);
  }
};
TORCH_MODULE(TwoOut);

}  // namespace testnets
