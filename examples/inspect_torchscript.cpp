// SPDX-License-Identifier: BSD-3-Clause
// Looking into, and rewriting, the inner layers of a TorchScript model someone else wrote.
//
// Python traced a small ResNet and saved it (examples/write_resnet.py). Here C++ loads it, hooks
// its inner blocks to collect activation statistics, halves the gradient that flows out of one
// block with a full backward hook, and checks everything against what Python's eager hooks saw
// on the same model with the same weights. The model's own code is not changed by hand: the
// hooks are registered on submodules, and `model.forward` fires them.
//
// Usage: inspect_torchscript <dir>   (<dir> holds what examples/write_resnet.py wrote)
#include <torch/csrc/jit/serialization/import.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir written by examples/write_resnet.py>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    torch::jit::Module model = torch::jit::load(dir + "/resnet_traced.pt");
    const modhooks::StateDict expected = modhooks::load(dir + "/resnet_expected.pt");
    const std::vector<std::string> blocks{"layer1.0", "layer1.1", "layer2.0", "layer2.1"};

    modhooks::StateDict stats;
    std::vector<modhooks::ScopedHandle> handles;
    for (const auto& name : blocks) {
      handles.emplace_back(modhooks::register_forward_hook(
          modhooks::submodule(model, name),
          [&stats, name](torch::jit::Module&, const std::vector<c10::IValue>&,
                         const c10::IValue& output) {
            const at::Tensor y = output.toTensor().detach();
            stats.insert_or_assign(name, at::stack({y.mean(), y.std()}));
          }));
    }
    // Halve the gradient flowing out of layer2.0 towards the earlier layers.
    handles.emplace_back(modhooks::register_full_backward_hook(
        modhooks::submodule(model, "layer2.0"),
        [](torch::jit::Module&, const modhooks::TensorList& grad_input,
           const modhooks::TensorList&) { return modhooks::TensorList{grad_input[0] * 0.5}; }));

    const at::Tensor x = expected.at("input").clone().requires_grad_();
    const at::Tensor y = model.forward({x}).toTensor();
    y.sum().backward();

    double worst = (y - expected.at("output")).abs().max().item<double>();
    for (const auto& name : blocks) {
      const at::Tensor s = stats.at(name);
      std::printf("%-9s activation mean %+.5f  std %.5f\n", name.c_str(), s[0].item<double>(),
                  s[1].item<double>());
      worst = std::max(worst, (s - expected.at("stats." + name)).abs().max().item<double>());
    }
    const double grad_gap = (x.grad() - expected.at("input_grad")).abs().max().item<double>();
    std::printf("input gradient with layer2.0's gradient halved: |sum| %.5f\n",
                x.grad().abs().sum().item<double>());
    std::printf("largest |C++ - Python eager|: outputs and statistics %.2e, input gradient %.2e\n",
                worst, grad_gap);
    if (worst > 1e-4 || grad_gap > 1e-4) {
      std::fprintf(stderr, "inspect_torchscript: C++ and Python disagree\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inspect_torchscript: %s\n", e.what());
    return 1;
  }
  return 0;
}
