// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ side of bench/probe_step_bench.py (which scripts the model, writes msprobe's
// config.json, and sets these figures beside msprobe's Python dump of the same step):
//   ./probe_step_bench DIR <steps> <rounds> [--instrument]
// Times a training step (forward, cross-entropy over 1000 classes, backward, SGD step,
// zero_grad) of torchvision's resnet18 as Python scripted it (DIR/resnet18.pt, random weights),
// batch 8x3x64x64, one intra-op thread, with modhooks::probe's PrecisionDebugger (DIR/config.json:
// task statistics, level L0, summary_mode statistics) started, stopped and stepped around every
// step, as msprobe's Python debugger is, against, as the baseline, the same step of a second copy
// of the model that no debugger touches, in the same process. Both copies run with TorchScript's
// graph optimizer off, as docs/probe.md runs a scripted model for its dumps. The dump goes to
// DIR/dump_cpp, one folder a step (step<N>/proc<pid>/: dump.json, construct.json, stack.json),
// the same folder for every block, as msprobe's Python dump writes DIR/dump_python. Each round
// runs `steps` steps of one then `steps` of the other (the order flips every round) after one
// warm-up round; prints one JSON line of milliseconds per step, the median over rounds of each.
// With --instrument, modhooks::instrument rewrites the dumped copy's call sites once before the
// rounds, so that the debugger's start() and stop() do not swap its methods every step.
#include <modhooks/modhooks.h>
#include <modhooks/probe.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "alternate.h"

namespace mp = modhooks::probe;

namespace {

/// One copy of the scripted model and its optimizer.
struct Trainer {
  explicit Trainer(const std::string& path)
      : model(torch::jit::load(path)), opt(parameters(model), torch::optim::SGDOptions(0.01)) {}
  static std::vector<at::Tensor> parameters(const torch::jit::Module& m) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : m.parameters()) out.push_back(p);
    return out;
  }
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) {
    return torch::cross_entropy_loss(modhooks::call(model, {x}).toTensor(), y);
  }
  torch::jit::Module model;
  torch::optim::SGD opt;
};

}  // namespace

int main(int argc, char** argv) {
  const bool instrumented = argc == 5 && std::string(argv[4]) == "--instrument";
  if (argc != 4 && !instrumented) {
    std::fprintf(stderr, "usage: %s DIR <steps> <rounds> [--instrument]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = std::atoi(argv[2]), rounds = std::atoi(argv[3]);
  torch::set_num_threads(1);
  const torch::jit::GraphOptimizerEnabledGuard eager_kernels(false);

  Trainer plain(dir + "/resnet18.pt"), probed(dir + "/resnet18.pt");
  plain.model.train();
  probed.model.train();
  if (instrumented) modhooks::instrument(probed.model);
  mp::Config config = mp::Config::from_file(dir + "/config.json");
  config.dump_path = dir + "/dump_cpp";
  mp::PrecisionDebugger debugger(config);
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({8, 3, 64, 64}), y = torch::randint(0, 1000, {8});

  auto plain_step = [&] {
    plain.loss(x, y).backward();
    plain.opt.step();
    plain.opt.zero_grad();
  };
  auto probed_step = [&] {
    debugger.start(probed.model);
    probed.loss(x, y).backward();
    debugger.stop();
    debugger.step();
    probed.opt.step();
    probed.opt.zero_grad();
  };
  auto [plain_ms, probed_ms] = bench::alternate(plain_step, probed_step, steps, rounds, [] {});
  std::printf(
      "{\"impl\": \"modhooks C++%s\", \"steps\": %d, \"rounds\": %d, \"plain_ms\": %.4f, "
      "\"dump_ms\": %.4f}\n",
      instrumented ? " instrumented" : "", steps, rounds, bench::median(plain_ms),
      bench::median(probed_ms));
  return 0;
}
