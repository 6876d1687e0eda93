// SPDX-License-Identifier: BSD-3-Clause
// A checkpoint written in Python, loaded into a C++ model whose layers have other names.
//
// Python saved `torch.save(model.state_dict(), "classifier.pt")` from
//   nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
// so its keys are "0.weight", "0.bias", "2.weight", "2.bias". The C++ model names its layers
// `hidden` and `out`. A load_state_dict pre-hook renames the keys as they arrive, the way
// Python code migrates old checkpoints; the load stays strict, so a key the hook missed would
// be an error rather than a silently untrained layer.
//
// Usage: python_checkpoint <dir>   (<dir> holds what examples/write_checkpoint.py wrote)
#include <ATen/core/grad_mode.h>
#include <ATen/ops/abs.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl()
      : hidden(register_module("hidden", torch::nn::Linear(4, 16))),
        out(register_module("out", torch::nn::Linear(16, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return out(torch::nn::functional::relu(hidden(x))); }
  torch::nn::Linear hidden, out;
};
TORCH_MODULE(Classifier);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir written by examples/write_checkpoint.py>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    Classifier model;
    const std::map<std::string, std::string> renames = {{"0.", "hidden."}, {"2.", "out."}};
    modhooks::ScopedHandle migrate(modhooks::register_load_state_dict_pre_hook(
        model,
        [&renames](torch::nn::Module&, modhooks::StateDict& state_dict, const std::string& prefix,
                   const modhooks::Metadata&, bool, std::vector<std::string>&,
                   std::vector<std::string>&, std::vector<std::string>&) {
          for (const std::string& key : state_dict.keys()) {
            for (const auto& [from, to] : renames) {
              if (key.rfind(prefix + from, 0) != 0) continue;
              const std::string renamed = prefix + to + key.substr(prefix.size() + from.size());
              std::printf("  pre-hook: %-10s -> %s\n", key.c_str(), renamed.c_str());
              state_dict.insert_or_assign(renamed, state_dict.at(key));
              state_dict.erase(key);
              break;
            }
          }
        }));

    const modhooks::StateDict checkpoint = modhooks::load(dir + "/classifier.pt");
    std::printf("loaded %zu tensors written by Python; loading them into the C++ model:\n",
                checkpoint.size());
    modhooks::load_state_dict(model, checkpoint);  // strict

    const modhooks::StateDict io = modhooks::load(dir + "/classifier_io.pt");
    at::NoGradGuard no_grad;
    const at::Tensor cpp = model->forward(io.at("input"));
    const double difference = (cpp - io.at("output")).abs().max().item<double>();
    std::printf("C++ output row 0: %+.5f %+.5f %+.5f\n", cpp[0][0].item<double>(),
                cpp[0][1].item<double>(), cpp[0][2].item<double>());
    std::printf("largest |C++ - Python| over the batch: %.3g\n", difference);
    return difference < 1e-5 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "python_checkpoint: %s\n", e.what());
    return 1;
  }
}
