// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The write rate of modhooks::probe's task "tensor" against a plain write of the same bytes to
// the same disk, and the memory the dump holds beside the model:
//   ./probe_write_bench DIR [rounds]
// A model of 8 Linear(512, 512) layers with ReLU, batch 128, SGD, one intra-op thread. Three
// blocks a round, their order rotating each round after a warm-up round: the training step
// alone (P); the step with the debugger (start, forward, backward, stop, step(), which returns
// once the step's files are on disk) dumping into DIR/dump (D); and the step followed by writing
// the files the dump wrote, the same count and sizes, with fopen, fwrite and fclose into
// DIR/plain (W). The dump writes at bytes / (D - P), the plain write at bytes / (W - P); both
// folders are emptied between blocks, outside the timing. Memory: the peak of live CPU
// allocator bytes (bench/cpu_memory.cpp) during one plain step beside the bytes live before it,
// and during one dumped step beside the bytes live before the debugger was made; their
// difference is what the dump holds (its tensor copies waiting for the writer thread and the
// buffers it keeps for the next copies, together bounded by Config::max_pending_bytes), of which
// `kept_bytes` are held between steps too. Prints one JSON line.
#include <modhooks/modhooks.h>
#include <modhooks/probe.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "alternate.h"
#include "cpu_memory.h"

namespace {

namespace fs = std::filesystem;
namespace mp = modhooks::probe;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    for (int i = 0; i < 8; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), modhooks::nn::Linear(512, 512)));
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& layer : layers) x = torch::relu(layer(x));
    return x;
  }
  std::vector<modhooks::nn::Linear> layers;
};
TORCH_MODULE(Net);

/// The sizes of the files under `folder`, in no particular order.
std::vector<std::uintmax_t> file_sizes(const fs::path& folder) {
  std::vector<std::uintmax_t> sizes;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file() && entry.path().parent_path().filename() == "dump_tensor_data") {
      sizes.push_back(entry.file_size());
    }
  }
  return sizes;
}

double milliseconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s DIR [rounds]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const int rounds = argc == 3 ? std::atoi(argv[2]) : 8;
  torch::set_num_threads(1);
  torch::manual_seed(0);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor x = torch::randn({128, 512});
  mp::Config config;
  config.task = "tensor";
  config.level = "L0";
  config.dump_path = (dir / "dump").string();
  const int64_t live_without_debugger = modhooks_bench::cpu_live();
  mp::PrecisionDebugger debugger(config);

  auto step = [&] {
    modhooks::call(net, x).pow(2).mean().backward();
    opt.step();
    opt.zero_grad();
  };
  auto dumped = [&] {
    debugger.start(net);
    modhooks::call(net, x).pow(2).mean().backward();
    debugger.stop();
    debugger.step();
    opt.step();
    opt.zero_grad();
  };
  // The files one dumped step writes: their sizes are what the plain write writes.
  fs::remove_all(dir);
  dumped();
  const std::vector<std::uintmax_t> sizes = file_sizes(dir / "dump");
  std::uintmax_t bytes = 0;
  for (const std::uintmax_t size : sizes) bytes += size;
  const std::vector<char> buffer(*std::max_element(sizes.begin(), sizes.end()), 1);
  auto plain_write = [&] {
    step();
    fs::create_directories(dir / "plain");
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::string path = (dir / "plain" / (std::to_string(i) + ".pt")).string();
      std::FILE* file = std::fopen(path.c_str(), "wb");
      if (file == nullptr || std::fwrite(buffer.data(), 1, sizes[i], file) != sizes[i] ||
          std::fclose(file) != 0) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        std::exit(1);
      }
    }
  };

  std::vector<double> p_ms, d_ms, w_ms;
  const std::vector<std::pair<std::vector<double>*, std::function<void()>>> blocks = {
      {&p_ms, step}, {&d_ms, dumped}, {&w_ms, plain_write}};
  for (int round = -1; round < rounds; ++round) {
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const auto& [out, run] = blocks[(k + static_cast<std::size_t>(round + 1)) % blocks.size()];
      fs::remove_all(dir / "dump");
      fs::remove_all(dir / "plain");
      const double ms = milliseconds(run);
      if (round >= 0) out->push_back(ms);
    }
  }
  // Memory: the plain step's beside what is live before it; the dumped step's beside what was
  // live before the debugger, so that the buffers it keeps between steps count.
  fs::remove_all(dir / "dump");
  const int64_t step_peak = modhooks_bench::peak_beside(step);
  const int64_t kept = modhooks_bench::cpu_live() - live_without_debugger;
  const int64_t dumped_peak = modhooks_bench::peak_beside(dumped) + kept;
  fs::remove_all(dir);

  const double p = bench::median(p_ms), d = bench::median(d_ms), w = bench::median(w_ms);
  const double mb = static_cast<double>(bytes) / 1e6;
  const double dump_rate = mb / ((d - p) / 1e3), plain_rate = mb / ((w - p) / 1e3);
  std::printf(
      "{\"files\": %zu, \"bytes\": %ju, \"rounds\": %d, \"step_ms\": %.3f, \"dumped_ms\": %.3f, "
      "\"step_and_plain_write_ms\": %.3f, \"dump_MBps\": %.1f, \"plain_MBps\": %.1f, "
      "\"ratio\": %.3f, \"goal\": 0.8, \"step_peak_bytes\": %jd, \"dumped_peak_bytes\": %jd, "
      "\"dump_holds_bytes\": %jd, \"kept_bytes\": %jd, \"max_pending_bytes\": %zu}\n",
      sizes.size(), bytes, rounds, p, d, w, dump_rate, plain_rate, dump_rate / plain_rate,
      static_cast<intmax_t>(step_peak), static_cast<intmax_t>(dumped_peak),
      static_cast<intmax_t>(dumped_peak - step_peak), static_cast<intmax_t>(kept),
      config.max_pending_bytes);
  return 0;
}
