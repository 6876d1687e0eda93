// SPDX-License-Identifier: BSD-3-Clause
// The Python training script of docs/migration.md, ported to C++ step by step: forward hooks
// that record activations, a full backward pre-hook that clips a gradient, a training loop, hook
// removal, and a checkpoint saved and loaded back into a fresh model with a load post-hook.
// Usage: port_from_python [checkpoint path, default model.pt]
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

namespace {

// nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)). modhooks::Sequential runs every
// child through its hooks; torch::nn::Sequential would call the children's forward directly.
modhooks::Sequential make_model() {
  return modhooks::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(),
                              torch::nn::Linear(32, 1));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "model.pt";
  at::manual_seed(0);
  modhooks::Sequential model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));

  // 1. Forward hooks: the mean activation of two layers.
  std::map<std::string, double> means;
  std::vector<modhooks::ScopedHandle> handles;
  for (const std::string name : {"0", "2"}) {
    handles.emplace_back(modhooks::register_forward_hook(
        modhooks::submodule(model, name),
        [&means, name](torch::nn::Module&, const std::vector<c10::IValue>&,
                       const c10::IValue& output) {
          means[name] = output.toTensor().detach().mean().item<double>();
        }));
  }

  // 2. A full backward pre-hook: clip the gradient arriving at the output layer. Returning
  //    std::nullopt is Python's returning None.
  modhooks::register_full_backward_pre_hook(
      modhooks::submodule(model, "2"),
      [](torch::nn::Module&,
         const modhooks::TensorList& grad_output) -> std::optional<modhooks::TensorList> {
        const double norm = grad_output[0].norm().item<double>();
        if (norm <= 1.0) return std::nullopt;
        return modhooks::TensorList{grad_output[0] / norm};
      });

  // 3. Training: model(x) runs the Sequential through modhooks::call, and each child too.
  const at::Tensor x = at::randn({256, 8});
  const at::Tensor y = (x.sum(1, /*keepdim=*/true) * 0.5).sin();
  for (int epoch = 0; epoch < 5; ++epoch) {
    optimizer.zero_grad();
    const at::Tensor loss = (model(x) - y).pow(2).mean();
    loss.backward();
    optimizer.step();
    std::printf("epoch %d loss %.4f means {'0': %+.4f, '2': %+.4f}\n", epoch, loss.item<double>(),
                means["0"], means["2"]);
  }

  // 4. The statistics hooks go: each ScopedHandle removes its hook, as handle.remove() would.
  handles.clear();

  // 5. Checkpoint: save, then resume into a fresh model. The file is torch.save's format, which
  //    Python reads with torch.load(path, weights_only=True).
  modhooks::save(modhooks::state_dict(model), path);
  modhooks::Sequential fresh = make_model();
  modhooks::register_load_state_dict_post_hook(
      fresh, [](torch::nn::Module&, modhooks::IncompatibleKeys& keys) {
        std::printf("missing %zu, unexpected %zu\n", keys.missing_keys.size(),
                    keys.unexpected_keys.size());
      });
  modhooks::load_state_dict(fresh, modhooks::load(path));

  const modhooks::StateDict trained = modhooks::state_dict(model);
  const modhooks::StateDict loaded = modhooks::state_dict(fresh);
  for (const auto& [key, tensor] : trained) {
    if (!loaded.contains(key) || !tensor.equal(loaded.at(key))) {
      std::printf("the loaded model differs at %s\n", key.c_str());
      return 1;
    }
  }
  return 0;
}
