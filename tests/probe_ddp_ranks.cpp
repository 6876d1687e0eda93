// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The C++ ranks of the probe's DDP test (tests/python/probe_ddp.py starts them under
// `torchrun --no-python`, and the same runs under Python's DDP with msprobe's debugger):
//   probe_ddp_ranks <dir> <run>...
// For each run in turn, in one gloo process group: probe_oracle.py's MLP from <dir>/init.pt under
// modhooks::dist::DistributedDataParallel, modhooks::probe::PrecisionDebugger from
// <dir>/<run>/config.json dumping to <dir>/<run>/cpp, 2 steps of SGD on this rank's inputs of
// <dir>/data.pt. A run whose name ends in `_inner` starts the debugger on the model inside the
// DDP object, the others on the DDP object, as probe_ddp.py's Python ranks do. Rank 0 writes
// <dir>/libtorch_version (md5's CRCs are Python's only with Python's kernels).
#include <modhooks/dist.h>
#include <modhooks/probe.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

namespace dist = modhooks::dist;
namespace mp = modhooks::probe;

namespace {

constexpr int kSteps = 2;

/// tests/python/probe_oracle.py's MLP.
struct MLPImpl : torch::nn::Module {
  MLPImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    act = register_module("act", torch::nn::ReLU());
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(fc2, modhooks::call(act, modhooks::call(fc1, x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::ReLU act{nullptr};
};
TORCH_MODULE(MLP);

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// One run: probe_ddp.py's `worker` does the same under Python's DDP.
void run(const std::string& dir, const std::string& name, const modhooks::StateDict& data) {
  const int rank = dist::get_rank();
  MLP net;
  modhooks::load_state_dict(net, modhooks::load(dir + "/init.pt"));
  dist::DistributedDataParallel ddp(net);
  mp::Config config = mp::Config::from_file(dir + "/" + name + "/config.json");
  config.dump_path = dir + "/" + name + "/cpp";
  mp::PrecisionDebugger debugger(config);
  const bool inner = ends_with(name, "_inner");
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < kSteps; ++step) {
    if (inner) {
      debugger.start(net);
    } else {
      debugger.start(ddp);
    }
    const at::Tensor& x = data.at("x." + std::to_string(rank) + "." + std::to_string(step));
    ddp(x).pow(2).mean().backward();
    debugger.stop();
    debugger.step();
    opt.step();
    ddp.zero_grad();
  }
  dist::barrier();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: probe_ddp_ranks <dir> <run>...\n";
    return 2;
  }
  const std::string dir = argv[1];
  dist::init_process_group(
      dist::InitOptions().backend("gloo").timeout(std::chrono::milliseconds(60000)));
  if (dist::get_rank() == 0) {
    std::ofstream(dir + "/libtorch_version")
        << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "\n";
  }
  const modhooks::StateDict data = modhooks::load(dir + "/data.pt");
  for (int i = 2; i < argc; ++i) {
    try {
      run(dir, argv[i], data);
    } catch (const std::exception& e) {
      // The other rank may wait in a collective: exit, and torchrun stops it.
      std::cout << "run " << argv[i] << ": FAILED on rank " << dist::get_rank() << ": " << e.what()
                << std::endl;
      std::exit(1);
    }
  }
  dist::destroy_process_group();
  return 0;
}
