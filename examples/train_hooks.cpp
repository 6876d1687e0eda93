// SPDX-License-Identifier: BSD-3-Clause
// A small C++ training loop that uses modhooks the way Python code uses module hooks:
//   - forward hooks on every layer collect activation statistics;
//   - full backward pre-hooks on the output layer count large gradients and clip their norm
//     with a ready-made modhooks::grad hook.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"

int main() {
  at::manual_seed(0);
  modhooks::Sequential model(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Linear(32, 32),
                             torch::nn::ReLU(), torch::nn::Linear(32, 1));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));

  // Forward hooks: the mean and the fraction of zeros of every layer's output, per epoch.
  struct Stats {
    double mean = 0, zeros = 0;
    int calls = 0;
  };
  std::map<std::string, Stats> stats;
  std::vector<modhooks::ScopedHandle> handles;
  for (const auto& child : model->named_children()) {
    const std::string name = child.key();
    handles.emplace_back(modhooks::register_forward_hook(
        child.value(), [&stats, name](torch::nn::Module&, const std::vector<c10::IValue>&,
                                      const c10::IValue& output) {
          const at::Tensor out = output.toTensor().detach();
          auto& s = stats[name];
          s.mean += out.mean().item<double>();
          s.zeros += out.eq(0).to(at::kFloat).mean().item<double>();
          ++s.calls;
        }));
  }

  // Backward pre-hooks on the output layer: the first counts the batches whose gradient is
  // large, the second (a ready-made modhooks::grad hook, run on the tensor's own device) clips
  // the gradient's norm to 1, so a few outliers in a batch cannot blow up the update.
  int clipped = 0;
  handles.emplace_back(modhooks::register_full_backward_pre_hook(
      model->ptr(4), [&clipped](torch::nn::Module&, const modhooks::TensorList& grad_output) {
        if (grad_output[0].norm().item<double>() > 1.0) ++clipped;
      }));
  handles.emplace_back(
      modhooks::register_full_backward_pre_hook(model->ptr(4), modhooks::grad::clip_norm(1.0)));

  const at::Tensor x = at::randn({256, 8});
  const at::Tensor y = (x.sum(1, true) * 0.5).sin() + 0.05 * at::randn({256, 1});
  for (int epoch = 1; epoch <= 5; ++epoch) {
    stats.clear();
    double loss_sum = 0;
    for (int64_t start = 0; start < 256; start += 32) {
      const auto xb = x.slice(0, start, start + 32);
      const auto yb = y.slice(0, start, start + 32);
      optimizer.zero_grad();
      const at::Tensor loss = (modhooks::call(model, xb) - yb).pow(2).mean() * 100;
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>();
    }
    std::printf("epoch %d  loss %.4f  gradients clipped so far %d\n", epoch, loss_sum / 8, clipped);
    for (const auto& [name, s] : stats) {
      std::printf("  layer %s: %d forward calls, mean activation %+.4f, zeros %.1f%%\n",
                  name.c_str(), s.calls, s.mean / s.calls, 100 * s.zeros / s.calls);
    }
  }
  return 0;
}
