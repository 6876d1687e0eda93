// SPDX-License-Identifier: BSD-3-Clause
// Cost of state dicts and checkpoints, each figure beside its baseline from the same run:
//   - 5000 x Linear(4,4) (10,000 tensors): state_dict() against named_parameters() with the
//     tensors detached, load_state_dict() against a named_parameters() + copy_ loop in
//     alternation, with the peak memory each adds beside the model;
//   - a 512 MiB model (8 x Linear(4096,4096)): load_state_dict() against the same copy_ loop in
//     alternation, as bytes per second, with the peak memory each adds beside the model;
//   - load() of a 512 MiB file written by Python's torch.save against fread of its bytes, and
//     with its CRC-32 check (the default) against without;
//   - libdeflate's CRC-32 (the check load() runs) of 256 MiB in memory against a memcpy of them;
//   - loading a safetensors file of 100,000 tiny tensors from memory against a memcpy of it.
// Python's figures for the same cases (its load_state_dict, its copy_ loop, torch.load of the
// same file) come from bench/python_state_bench.py, which writes that file (run-bench.sh).
#include <ATen/core/grad_mode.h>
#include <benchmark/benchmark.h>
#include <libdeflate.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/modhooks.h"
#include "paired.h"

namespace {

torch::nn::ModuleList linears(int count, int features) {
  torch::nn::ModuleList model;
  for (int i = 0; i < count; ++i) model->push_back(torch::nn::Linear(features, features));
  return model;
}

/// What a user without modhooks writes to load weights: walk named_parameters(), copy_ each.
void copy_loop(torch::nn::Module& model, const modhooks::StateDict& source) {
  at::NoGradGuard no_grad;
  for (auto& parameter : model.named_parameters()) {
    parameter.value().copy_(source.at(parameter.key()));
  }
}

/// A state dict with the model's keys and fresh values, so that loads really copy.
modhooks::StateDict fresh_values(torch::nn::Module& model) {
  modhooks::StateDict sd = modhooks::state_dict(model);
  for (auto& [key, tensor] : sd) tensor = at::randn_like(tensor);
  return sd;
}

void BM_ManyLinear_NamedParametersDetached(benchmark::State& state) {
  auto model = linears(5000, 4);
  for (auto _ : state) {
    std::vector<at::Tensor> detached;
    for (const auto& parameter : model->named_parameters()) {
      detached.push_back(parameter.value().detach());
    }
    benchmark::DoNotOptimize(detached);
  }
}
BENCHMARK(BM_ManyLinear_NamedParametersDetached)->Unit(benchmark::kMillisecond);

void BM_ManyLinear_StateDict(benchmark::State& state) {
  auto model = linears(5000, 4);
  for (auto _ : state) benchmark::DoNotOptimize(modhooks::state_dict(model));
}
BENCHMARK(BM_ManyLinear_StateDict)->Unit(benchmark::kMillisecond);

/// `load_state_dict` timed in alternation with the copy_ loop over the same model and source,
/// with their ratio and the peak resident memory one load adds beside the model and the source
/// (measured once after the timing; Linux's VmHWM).
void load_vs_copy_loop(benchmark::State& state, torch::nn::Module& model,
                       const modhooks::StateDict& source) {
  modhooks_bench::paired(
      state, 1, [&] { copy_loop(model, source); },
      [&] { benchmark::DoNotOptimize(modhooks::load_state_dict(model, source)); });
  state.counters["ratio"] = state.counters["measured_us"] / state.counters["baseline_us"];
  state.counters["loop_peak_extra_KiB"] =
      static_cast<double>(modhooks_bench::peak_extra_kb([&] { copy_loop(model, source); }));
  state.counters["load_peak_extra_KiB"] = static_cast<double>(modhooks_bench::peak_extra_kb(
      [&] { benchmark::DoNotOptimize(modhooks::load_state_dict(model, source)); }));
}

void BM_ManyLinear_LoadStateDict_vs_CopyLoop(benchmark::State& state) {
  auto model = linears(5000, 4);
  const auto source = fresh_values(*model);
  load_vs_copy_loop(state, *model, source);
}
BENCHMARK(BM_ManyLinear_LoadStateDict_vs_CopyLoop)->Unit(benchmark::kMillisecond);

constexpr int64_t kBigBytes = 8 * (4096 * 4096 + 4096) * 4;

/// One 512 MiB model and source for both figures, so that both copy between the same pages.
struct BigModel {
  torch::nn::ModuleList model = linears(8, 4096);
  modhooks::StateDict source = fresh_values(*model);
};
BigModel& big_model() {
  static BigModel big;
  return big;
}

void BM_512MiB_LoadStateDict_vs_CopyLoop(benchmark::State& state) {
  auto& big = big_model();
  load_vs_copy_loop(state, *big.model, big.source);
  state.counters["baseline_GBps"] =
      static_cast<double>(kBigBytes) / 1e3 / state.counters["baseline_us"];
  state.counters["measured_GBps"] =
      static_cast<double>(kBigBytes) / 1e3 / state.counters["measured_us"];
}
BENCHMARK(BM_512MiB_LoadStateDict_vs_CopyLoop)->Unit(benchmark::kMillisecond);

/// The 512 MiB file python_state_bench.py wrote with torch.save, or empty when there is none.
std::string python_checkpoint(benchmark::State& state) {
  const char* path = std::getenv("MODHOOKS_BENCH_CHECKPOINT");
  if (path == nullptr || !std::ifstream(path)) {
    state.SkipWithError("MODHOOKS_BENCH_CHECKPOINT names no file (scripts/run-bench.sh sets it)");
    return {};
  }
  return path;
}

void BM_512MiBFile_ReadBytes(benchmark::State& state) {
  const std::string path = python_checkpoint(state);
  if (path.empty()) return;
  std::vector<char> bytes(static_cast<std::size_t>(std::ifstream(path, std::ios::ate).tellg()));
  for (auto _ : state) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    benchmark::DoNotOptimize(std::fread(bytes.data(), 1, bytes.size(), file));
    std::fclose(file);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}
BENCHMARK(BM_512MiBFile_ReadBytes)->Unit(benchmark::kMillisecond);

void BM_512MiBFile_Load(benchmark::State& state) {
  const std::string path = python_checkpoint(state);
  if (path.empty()) return;
  for (auto _ : state) benchmark::DoNotOptimize(modhooks::load(path));
  state.SetBytesProcessed(state.iterations() * kBigBytes);
}
BENCHMARK(BM_512MiBFile_Load)->Unit(benchmark::kMillisecond);

/// What the CRC-32 check costs: `load` as it is by default, timed in alternation with `load`
/// told not to check.
void BM_512MiBFile_LoadChecked_vs_Unchecked(benchmark::State& state) {
  const std::string path = python_checkpoint(state);
  if (path.empty()) return;
  modhooks::LoadOptions unchecked;
  unchecked.verify_crc32 = false;
  modhooks_bench::paired(
      state, 1, [&] { benchmark::DoNotOptimize(modhooks::load(path, unchecked)); },
      [&] { benchmark::DoNotOptimize(modhooks::load(path)); });
}
BENCHMARK(BM_512MiBFile_LoadChecked_vs_Unchecked)->Unit(benchmark::kMillisecond);

/// The CRC-32 alone, at the speed it runs over memory: 256 MiB (far beyond the caches), timed in
/// alternation with a memcpy of the same bytes.
void BM_256MiB_Crc32_vs_Memcpy(benchmark::State& state) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<unsigned char> bytes(kBytes), copy(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 2654435761u);
  modhooks_bench::paired(
      state, 1,
      [&] {
        std::memcpy(copy.data(), bytes.data(), kBytes);
        benchmark::DoNotOptimize(copy.data());
      },
      [&] { benchmark::DoNotOptimize(::libdeflate_crc32(0, bytes.data(), kBytes)); });
}
BENCHMARK(BM_256MiB_Crc32_vs_Memcpy)->Unit(benchmark::kMillisecond);

/// A safetensors file of 100,000 one-byte tensors, as bytes: what made header parsing
/// quadratic (25 s) before it was a single pass.
std::string hundred_thousand_entries() {
  constexpr int kEntries = 100000;
  modhooks::StateDict sd;
  for (int i = 0; i < kEntries; ++i) {
    sd.insert_or_assign(std::string("t").append(std::to_string(i)), at::zeros({1}, at::kByte));
  }
  return modhooks::detail::save_to_bytes(sd, modhooks::detail::CheckpointFormat::kSafetensors);
}

/// Parsing and loading that file from memory, timed in alternation with a memcpy of its bytes.
void BM_SafetensorsHeader100k_Load_vs_Memcpy(benchmark::State& state) {
  const std::string bytes = hundred_thousand_entries();
  std::string copy(bytes.size(), '\0');
  modhooks_bench::paired(
      state, 1,
      [&] {
        std::memcpy(copy.data(), bytes.data(), bytes.size());
        benchmark::DoNotOptimize(copy.data());
      },
      [&] {
        benchmark::DoNotOptimize(modhooks::detail::load_from_bytes(
            bytes, modhooks::detail::CheckpointFormat::kSafetensors));
      });
}
BENCHMARK(BM_SafetensorsHeader100k_Load_vs_Memcpy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
