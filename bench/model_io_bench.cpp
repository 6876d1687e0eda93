// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// load_model and mapped load of 1 GiB checkpoints, each timed in alternation with its baseline
// in the same run (paired.h), page cache warm (the files are written, then read once, first).
//
// The files are written into $MODHOOKS_BENCH_DIR (default: the working directory) as
// model_io_1GiB.safetensors and model_io_1GiB.pt, the same model python_model_io_bench.py loads,
// and are left there for it; delete them when done.
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/checkpoint/model_io.h"
#include "paired.h"

namespace {

/// 16 parameters of 64 MiB (float32 [4096, 4096]): 1 GiB, the shape of 16 large Linear weights.
constexpr int kParameters = 16;
constexpr std::int64_t kSide = 4096;
constexpr std::uint64_t kBytes = std::uint64_t{kParameters} * kSide * kSide * 4;

struct BigImpl : torch::nn::Module {
  explicit BigImpl(float value) {
    for (int i = 0; i < kParameters; ++i) {
      register_parameter(std::string("w").append(std::to_string(i)),
                         at::full({kSide, kSide}, value));
    }
  }
};

std::string bench_path(const std::string& name) {
  const char* dir = std::getenv("MODHOOKS_BENCH_DIR");
  return (dir ? std::string(dir) + "/" : std::string()) + name;
}

/// The file, written once per run from a model of 1.5f, and read once so its pages are cached.
const std::string& checkpoint(const std::string& name) {
  static std::map<std::string, std::string> written;
  auto found = written.find(name);
  if (found != written.end()) return found->second;
  const std::string path = bench_path(name);
  {
    auto source = std::make_shared<BigImpl>(1.5f);
    modhooks::save_model(source, path);
  }
  std::vector<char> buffer(std::size_t{1} << 24);
  std::ifstream in(path, std::ios::binary);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()))) {
  }
  return written.emplace(name, path).first->second;
}

/// The model the loads write into, 1 GiB, allocated and touched once.
std::shared_ptr<BigImpl>& model() {
  static auto m = std::make_shared<BigImpl>(0.0f);
  return m;
}

/// The bytes of the file a load copies, in the file: a mapping populated once, so the baseline
/// is a plain memcpy of page-cache pages already mapped (no page faults in its timing).
struct Mapping {
  explicit Mapping(const std::string& path) : fd(::open(path.c_str(), O_RDONLY)) {
    size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
    data = static_cast<char*>(::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0));
  }
  ~Mapping() {
    ::munmap(data, size);
    ::close(fd);
  }
  int fd;
  std::size_t size;
  char* data;
};

/// memcpy of kBytes of the file (a safetensors file's data exactly; a torch.save file's records
/// and the zip headers between them, give or take a few KiB) into the model's parameters.
void memcpy_into_model(const Mapping& file) {
  const char* from = file.data + file.size - kBytes;
  for (auto& p : model()->parameters()) {
    std::memcpy(p.data_ptr(), from, p.nbytes());
    from += p.nbytes();
  }
  benchmark::ClobberMemory();
}

/// pread of the same bytes into the parameters: the kernel's copy out of the page cache.
void pread_into_model(const Mapping& file) {
  off_t offset = static_cast<off_t>(file.size - kBytes);
  for (auto& p : model()->parameters()) {
    benchmark::DoNotOptimize(::pread(file.fd, p.data_ptr(), p.nbytes(), offset));
    offset += static_cast<off_t>(p.nbytes());
  }
  benchmark::ClobberMemory();
}

void report_bytes(benchmark::State& state) {
  state.counters["GB/s_measured"] = benchmark::Counter(static_cast<double>(kBytes) * 1e-9 /
                                                       (state.counters["measured_us"] * 1e-6));
  state.counters["GB/s_baseline"] = benchmark::Counter(static_cast<double>(kBytes) * 1e-9 /
                                                       (state.counters["baseline_us"] * 1e-6));
}

/// load_model of `name` with `options`, timed in alternation with `baseline` on the same file.
void load_model_vs(benchmark::State& state, const char* name, void (*baseline)(const Mapping&),
                   const modhooks::LoadOptions& options = modhooks::LoadOptions()) {
  const std::string& path = checkpoint(name);
  const Mapping file(path);
  modhooks_bench::paired(
      state, 1, [&] { baseline(file); },
      [&] { benchmark::DoNotOptimize(modhooks::load_model(model(), path, true, options)); });
  report_bytes(state);
}

void BM_1GiBSafetensors_LoadModel_vs_MemcpyFromMapping(benchmark::State& state) {
  load_model_vs(state, "model_io_1GiB.safetensors", memcpy_into_model);
}
BENCHMARK(BM_1GiBSafetensors_LoadModel_vs_MemcpyFromMapping)->Unit(benchmark::kMillisecond);

void BM_1GiBSafetensors_LoadModel_vs_Pread(benchmark::State& state) {
  load_model_vs(state, "model_io_1GiB.safetensors", pread_into_model);
}
BENCHMARK(BM_1GiBSafetensors_LoadModel_vs_Pread)->Unit(benchmark::kMillisecond);

/// load_model of the torch.save file, CRC-32s checked (the default), against memcpy.
void BM_1GiBTorchSave_LoadModelCrc_vs_MemcpyFromMapping(benchmark::State& state) {
  load_model_vs(state, "model_io_1GiB.pt", memcpy_into_model);
}
BENCHMARK(BM_1GiBTorchSave_LoadModelCrc_vs_MemcpyFromMapping)->Unit(benchmark::kMillisecond);

/// The same without the CRC-32 check, against the same baseline.
void BM_1GiBTorchSave_LoadModelNoCrc_vs_MemcpyFromMapping(benchmark::State& state) {
  modhooks::LoadOptions unchecked;
  unchecked.verify_crc32 = false;
  load_model_vs(state, "model_io_1GiB.pt", memcpy_into_model, unchecked);
}
BENCHMARK(BM_1GiBTorchSave_LoadModelNoCrc_vs_MemcpyFromMapping)->Unit(benchmark::kMillisecond);

/// Cold page cache: the file's pages dropped before each call of either side
/// (posix_fadvise(DONTNEED) of this file alone, which needs no privilege and leaves the rest of
/// the machine's cache alone), load_model against a pread of the same bytes into the model.
void load_model_cold_vs_pread(benchmark::State& state, const char* name) {
  const std::string& path = checkpoint(name);
  const int fd = ::open(path.c_str(), O_RDONLY);
  const auto size = static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END));
  const auto drop = [&] { ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); };
  modhooks_bench::paired(
      state, 1,
      [&] {
        drop();
        auto offset = static_cast<off_t>(size - kBytes);
        for (auto& p : model()->parameters()) {
          benchmark::DoNotOptimize(::pread(fd, p.data_ptr(), p.nbytes(), offset));
          offset += static_cast<off_t>(p.nbytes());
        }
      },
      [&] {
        drop();
        benchmark::DoNotOptimize(modhooks::load_model(model(), path));
      });
  ::close(fd);
  report_bytes(state);
}

void BM_1GiBSafetensors_LoadModelCold_vs_PreadCold(benchmark::State& state) {
  load_model_cold_vs_pread(state, "model_io_1GiB.safetensors");
}
BENCHMARK(BM_1GiBSafetensors_LoadModelCold_vs_PreadCold)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

void BM_1GiBTorchSave_LoadModelCrcCold_vs_PreadCold(benchmark::State& state) {
  load_model_cold_vs_pread(state, "model_io_1GiB.pt");
}
BENCHMARK(BM_1GiBTorchSave_LoadModelCrcCold_vs_PreadCold)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

/// Mapped `load` of the 1 GiB file against mapped `load` of a file with the same header (16
/// tensors of the same names and dtype) and 64 bytes of data: the time goes with the header.
void BM_1GiBSafetensors_LoadMmap_vs_SameHeaderTinyFile(benchmark::State& state) {
  const std::string& path = checkpoint("model_io_1GiB.safetensors");
  const std::string tiny = bench_path("model_io_tiny.safetensors");
  {
    modhooks::StateDict sd;
    for (int i = 0; i < kParameters; ++i) {
      sd.insert_or_assign(std::string("w").append(std::to_string(i)), at::full({1}, 1.5f));
    }
    modhooks::save(sd, tiny);
  }
  modhooks::LoadOptions mapped;
  mapped.mmap = true;
  modhooks_bench::paired(
      state, 1, [&] { benchmark::DoNotOptimize(modhooks::load(tiny, mapped)); },
      [&] { benchmark::DoNotOptimize(modhooks::load(path, mapped)); });
  std::remove(tiny.c_str());
}
BENCHMARK(BM_1GiBSafetensors_LoadMmap_vs_SameHeaderTinyFile)->Unit(benchmark::kMicrosecond);

/// Peak resident memory of load_model beside the model, in MiB; the baseline column is `load` +
/// `load_state_dict`'s.
void BM_1GiB_PeakExtraMemory(benchmark::State& state) {
  const std::string& st = checkpoint("model_io_1GiB.safetensors");
  const std::string& pt = checkpoint("model_io_1GiB.pt");
  std::int64_t model_io_st = 0, model_io_pt = 0, plain = 0;
  for (auto _ : state) {
    model_io_st = modhooks_bench::peak_extra_kb([&] { modhooks::load_model(model(), st); });
    model_io_pt = modhooks_bench::peak_extra_kb([&] { modhooks::load_model(model(), pt); });
    plain = modhooks_bench::peak_extra_kb(
        [&] { modhooks::load_state_dict(model(), modhooks::load(st)); });
  }
  state.counters["load_model_safetensors_MiB"] = static_cast<double>(model_io_st) / 1024;
  state.counters["load_model_torchsave_MiB"] = static_cast<double>(model_io_pt) / 1024;
  state.counters["load+load_state_dict_MiB"] = static_cast<double>(plain) / 1024;
}
BENCHMARK(BM_1GiB_PeakExtraMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
