// SPDX-License-Identifier: BSD-3-Clause
// A weight-normed 1-D convolution stack trained in Python, resumed here for a few steps, and
// handed back (weight_norm_resume.py beside it starts and finishes the run).
//
// Python built nn.Sequential(weight_norm(Conv1d(1, 8, 5)), LeakyReLU, weight_norm(Conv1d(8, 8,
// 3)), LeakyReLU, weight_norm(Conv1d(8, 1, 3))) and saved its state dict: "0.weight_g",
// "0.weight_v", "0.bias", ... The same model here, with modhooks' weight_norm on the same
// layers, loads it strictly, trains with the same optimizer and saves a state dict Python loads
// back into its own model.
//
// Usage: weight_norm_resume <dir>   (<dir> holds what `weight_norm_resume.py start` wrote)
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

namespace nu = modhooks::nn::utils;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir written by weight_norm_resume.py start>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    using torch::nn::Conv1d;
    using torch::nn::Conv1dOptions;
    auto leaky = [] {
      return torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.1));
    };
    modhooks::Sequential model(nu::weight_norm(Conv1d(Conv1dOptions(1, 8, 5).padding(2))), leaky(),
                               nu::weight_norm(Conv1d(Conv1dOptions(8, 8, 3).padding(1))), leaky(),
                               nu::weight_norm(Conv1d(Conv1dOptions(8, 1, 3).padding(1))));
    modhooks::load_state_dict(model, modhooks::load(dir + "/model.pt"));  // strict

    const modhooks::StateDict data = modhooks::load(dir + "/data.pt");
    const at::Tensor x = data.at("x");
    const at::Tensor y = data.at("y");
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      const at::Tensor loss = (model->forward(x) - y).pow(2).mean();
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item<double>());
    }
    std::printf("C++: resumed %zu steps, loss %g\n", losses.size(), losses.back());
    modhooks::save(modhooks::state_dict(model), dir + "/cpp.pt");
    modhooks::StateDict out;
    out.insert_or_assign("losses", at::tensor(losses, at::kDouble));
    modhooks::save(out, dir + "/cpp_losses.pt");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weight_norm_resume: %s\n", e.what());
    return 1;
  }
  return 0;
}
