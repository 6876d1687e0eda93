// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// A counter of live CPU tensor bytes for the benchmarks that compare memory with Python
// (bench/fsdp_step_bench.cpp and .py): a shared library that, when it is loaded, puts an
// allocator in front of libtorch's CPU allocator (c10::SetCPUAllocator, priority above the
// default's) counting the bytes it has handed out and not yet had back, and their peak. C++
// links it (its static initializer runs before main); Python loads it with
// torch.ops.load_library before building anything, and reads the same counter through
//   torch.ops.modhooks_bench.cpu_memory() -> [live, peak]
//   torch.ops.modhooks_bench.reset_cpu_peak()
// Only storages allocated after it is loaded are counted (the figures are differences), and
// only those of the CPU allocator: gloo's own buffers and other mallocs are not.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cpu_memory.h"

#define MODHOOKS_BENCH_EXPORT __attribute__((visibility("default")))

namespace {

/// Wraps the allocator it found. Its DataPtrs are simple (context == data, as the default
/// allocator's are): the wrapped DataPtr and the size wait in a map under the pointer, so
/// raw_deleter() works and a freed pointer finds its size.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // n == 0
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.emplace(data, Block{std::move(inner), n});
      live_ += static_cast<int64_t>(n);
      if (live_ > peak_) peak_ = live_;
    }
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

  std::vector<int64_t> figures() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {live_, peak_};
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
  }

  static CountingAllocator* instance;

 private:
  struct Block {
    c10::DataPtr inner;
    std::size_t bytes;
  };

  static void release(void* data) {
    CountingAllocator& self = *instance;
    c10::DataPtr inner;  // frees the block on leaving, outside the lock
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto it = self.blocks_.find(data);
      if (it == self.blocks_.end()) return;  // cannot happen: only our DataPtrs name release
      inner = std::move(it->second.inner);
      self.live_ -= static_cast<int64_t>(it->second.bytes);
      self.blocks_.erase(it);
    }
  }

  c10::Allocator* inner_;
  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  int64_t live_ = 0, peak_ = 0;
};

CountingAllocator* CountingAllocator::instance = nullptr;

/// Installed while the library loads. Never deleted: storages it allocated may outlive every
/// static destructor.
[[maybe_unused]] const bool installed = [] {
  CountingAllocator::instance = new CountingAllocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(CountingAllocator::instance, /*priority=*/1);
  return true;
}();

}  // namespace

namespace modhooks_bench {

MODHOOKS_BENCH_EXPORT int64_t cpu_live() { return CountingAllocator::instance->figures()[0]; }
MODHOOKS_BENCH_EXPORT int64_t cpu_peak() { return CountingAllocator::instance->figures()[1]; }
MODHOOKS_BENCH_EXPORT void reset_cpu_peak() { CountingAllocator::instance->reset_peak(); }

}  // namespace modhooks_bench

TORCH_LIBRARY(modhooks_bench, m) {
  m.def("cpu_memory() -> int[]", [] { return CountingAllocator::instance->figures(); });
  m.def("reset_cpu_peak() -> ()", [] { modhooks_bench::reset_cpu_peak(); });
}
