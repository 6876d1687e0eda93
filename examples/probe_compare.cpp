// SPDX-License-Identifier: BSD-3-Clause
// My C++ model gives other numbers than Python: which module? The C++ port of probe_compare.py's
//
//   class Net(nn.Module):          fc1 = nn.Linear(8, 16); act = nn.GELU()
//                                  norm = nn.LayerNorm(16); fc2 = nn.Linear(16, 4)
//       def forward(self, x):      return self.fc2(self.norm(self.act(self.fc1(x))))
//
// loads Python's weights and input and dumps the same training step as msprobe's Python run,
// reading the same config.json, with modhooks::probe::PrecisionDebugger. `msprobe compare` of the
// two dumps then matches every row. With --skew the port has a bug that a glance at the code
// misses: its GELU uses the tanh approximation, and compare names Module.act.GELU.forward.0.
//
// Usage: probe_compare <dir> [--skew]   (<dir>: what `probe_compare.py python <dir>` wrote; the
//        dump goes to <dir>/dump_cpp, or <dir>/dump_cpp_skew)
#include <torch/nn/options/activation.h>
#include <torch/nn/options/normalization.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "modhooks/modhooks.h"
#include "modhooks/probe.h"

namespace {

// Registered in Python's order, so that named_modules() and the state dict's keys agree. The
// children are modhooks' holders: calling them fires their hooks, which the debugger needs.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool skew)
      : fc1(register_module("fc1", modhooks::nn::Linear(8, 16))),
        act(register_module("act", modhooks::nn::GELU(torch::nn::GELUOptions().approximate(
                                       skew ? "tanh" : "none")))),
        norm(register_module("norm", modhooks::nn::LayerNorm(
                                         torch::nn::LayerNormOptions(std::vector<int64_t>{16})))),
        fc2(register_module("fc2", modhooks::nn::Linear(16, 4))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(norm(act(fc1(x)))); }
  modhooks::nn::Linear fc1;
  modhooks::nn::GELU act;
  modhooks::nn::LayerNorm norm;
  modhooks::nn::Linear fc2;
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) try {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args.size() > 2 || (args.size() == 2 && args[1] != "--skew")) {
    std::fprintf(stderr, "usage: probe_compare <dir> [--skew]\n");
    return 2;
  }
  const std::string dir = args[0];
  const bool skew = args.size() == 2;

  Net model(skew);
  modhooks::load_state_dict(model, modhooks::load(dir + "/model.pt"));
  const at::Tensor x = modhooks::load_object(dir + "/input.pt").toGenericDict().at("x").toTensor();

  // Python's config.json, its dump apart from Python's.
  namespace mp = modhooks::probe;
  mp::Config config = mp::Config::from_file(dir + "/config.json");
  config.dump_path = dir + (skew ? "/dump_cpp_skew" : "/dump_cpp");
  std::filesystem::remove_all(config.dump_path);  // this run's proc<pid> folder alone
  mp::PrecisionDebugger debugger(config);

  debugger.start(model);
  const at::Tensor loss = modhooks::call(model, x).pow(2).mean();
  loss.backward();
  debugger.stop();
  debugger.step();  // step0's dump.json is complete on disk
  std::printf("c++%s: loss %.6f, the dump in %s\n", skew ? " (GELU with tanh)" : "",
              loss.item<double>(), config.dump_path.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "probe_compare: %s\n", e.what());
  return 1;
}
