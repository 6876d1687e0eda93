// SPDX-License-Identifier: BSD-3-Clause
// The memory modhooks::load holds, measured: this binary replaces the global operator new and
// delete and wraps libtorch's CPU allocator (tensor data, the records read), so it sees every
// byte the load allocates, and checks the peak against what docs/state.md promises for a
// torch.save file: its size plus 1 MiB; and what load_state_dict holds beside the model. Its own
// binary because the replacement is global.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/checkpoint/object.h"
#include "modhooks/core/error.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_hooks.h"
#include "test_util.h"
#include "torch_save_archive.h"

namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};

void add_live(std::int64_t n) {
  const std::int64_t now = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

/// Every block carries its requested size in a header as wide as its alignment.
void* tracked_alloc(std::size_t n, std::size_t align) {
  if (align < 16) align = 16;
  void* block = nullptr;
  if (posix_memalign(&block, align, align + n) != 0) return nullptr;
  *static_cast<std::size_t*>(block) = n;
  *reinterpret_cast<std::size_t*>(static_cast<char*>(block) + align - sizeof(std::size_t)) = align;
  add_live(static_cast<std::int64_t>(n));
  return static_cast<char*>(block) + align;
}

void tracked_free(void* p) {
  if (p == nullptr) return;
  const std::size_t align =
      *reinterpret_cast<std::size_t*>(static_cast<char*>(p) - sizeof(std::size_t));
  char* block = static_cast<char*>(p) - align;
  add_live(-static_cast<std::int64_t>(*reinterpret_cast<std::size_t*>(block)));
  std::free(block);
}

void* must(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return must(tracked_alloc(n, 16)); }
void* operator new[](std::size_t n) { return must(tracked_alloc(n, 16)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n, 16); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n, 16); }
void* operator new(std::size_t n, std::align_val_t a) {
  return must(tracked_alloc(n, static_cast<std::size_t>(a)));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return must(tracked_alloc(n, static_cast<std::size_t>(a)));
}
void operator delete(void* p) noexcept { tracked_free(p); }
void operator delete[](void* p) noexcept { tracked_free(p); }
void operator delete(void* p, std::size_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::size_t) noexcept { tracked_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { tracked_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { tracked_free(p); }

namespace {

using namespace std::string_literals;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define MODHOOKS_ALLOCATE_CONST
#else
#define MODHOOKS_ALLOCATE_CONST const
#endif

/// libtorch's CPU allocator, counting what it hands out (the records load reads: the pickle,
/// the tensor data) into the same live total.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t n) MODHOOKS_ALLOCATE_CONST override {
    // The context is malloc'ed, not new'ed: it is the test's bookkeeping, not the load's.
    auto* context = static_cast<Context*>(std::malloc(sizeof(Context)));
    new (context) Context{base_->allocate(n), n};
    add_live(static_cast<std::int64_t>(n));
    void* data = context->inner.get();
    return c10::DataPtr(data, context, &release, context->inner.device());
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  struct Context {
    c10::DataPtr inner;
    std::size_t n;
  };
  static void release(void* p) {
    auto* context = static_cast<Context*>(p);
    add_live(-static_cast<std::int64_t>(context->n));
    context->~Context();
    std::free(context);
  }
  c10::Allocator* base_;
};

/// What docs/state.md promises a torch.save file's load holds at most, once its zip directory
/// is checked: 16 times the file's size plus 1 MiB.
std::int64_t bound(std::int64_t file_size) { return 16 * file_size + (1 << 20); }

struct Measured {
  std::int64_t peak;  // most bytes held at once during the load, beyond what was held before
  std::string error;  // the modhooks::Error's text, or empty when the file loaded
};

/// Runs `f` with every allocation counted: the most bytes it held at once beyond what was held
/// before, and the modhooks::Error's text it threw (empty when none).
Measured measure(const std::function<void()>& f) {
  static CountingCpuAllocator* counting = [] {
    auto* allocator = new CountingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/255);
    return allocator;
  }();
  (void)counting;
  Measured out{0, {}};
  const std::int64_t before = g_live.load();
  g_peak.store(before);
  try {
    f();
    out.peak = g_peak.load() - before;
  } catch (const modhooks::Error& e) {
    out.peak = g_peak.load() - before;
    out.error = e.what();
  }
  return out;
}

/// Loads `path` with every allocation counted, by `load` or, with `object`, `load_object`.
Measured measure_load(const std::string& path, bool object = false) {
  return measure([&] {
    if (object) {
      const c10::IValue loaded = modhooks::load_object(path);
    } else {
      modhooks::StateDict sd = modhooks::load(path);
    }
  });
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "modhooks_load_memory_" + name;
}

/// A torch.save archive of this data.pkl and these data/<key> records, written to a file.
std::string write_archive(const std::string& name, const std::string& pickle,
                          const std::vector<std::pair<std::string, std::string>>& records = {}) {
  const std::string path = temp_path(name);
  std::ofstream file(path, std::ios::binary);
  test_archives::write_torch_save(pickle, records, [&](const void* p, std::size_t n) {
    file.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    return n;
  });
  return path;
}

std::int64_t file_size(const std::string& path) {
  return static_cast<std::int64_t>(std::ifstream(path, std::ios::ate | std::ios::binary).tellg());
}

std::string repeated(const std::string& op, int times) {
  std::string out;
  out.reserve(op.size() * static_cast<std::size_t>(times));
  for (int i = 0; i < times; ++i) out += op;
  return out;
}

/// Pickled _rebuild_tensor_v2(FloatStorage 'a' of 4, 0, (4,), (1,), False, OrderedDict()),
/// with the callable in memo 0 and the argument tuple in memo 1.
const std::string kTensorSetUp =
    "\x80\x02"
    "ctorch._utils\n_rebuild_tensor_v2\nq\x00"
    "((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
    "aX\x03\x00\x00\x00"
    "cpuK\x04tQK\x00K\x04\x85K\x01\x85\x89"
    "ccollections\nOrderedDict\n)Rtq\x01"s;

struct Flood {
  const char* name;
  std::string pickle;
  std::vector<std::pair<std::string, std::string>> records;
};

std::vector<Flood> floods() {
  constexpr int kOps = 400000;
  const std::string proto = "\x80\x02";
  const std::string long_string =
      "X"s + std::string("\x00\x00\x10\x00", 4) + std::string(1 << 20, 'x');
  return {
      {"none", proto + repeated("N", kOps) + ".", {}},
      {"empty_dict", proto + repeated("}", kOps) + ".", {}},
      {"empty_tuple", proto + repeated(")", kOps) + ".", {}},
      {"binget", proto + "Nq\x00"s + repeated("h\x00"s, kOps) + ".", {}},
      {"mark", proto + repeated("(", kOps) + ".", {}},
      {"memoize", proto + "N" + repeated("\x94", kOps) + ".", {}},
      {"sparse_memo", proto + "Nr\xff\xff\xff\x0f.", {}},
      // d[''] = None, memoized each time: SETITEM grows the dict, MEMOIZE the memo.
      {"dict_items", proto + "}" + repeated("\x8c\x00N\x94s"s, kOps) + ".", {}},
      // A 1 MiB string, memoized, then got again and again, and tupled.
      {"long_string", proto + long_string + "q\x00" + repeated("h\x00\x85"s, kOps / 2) + ".", {}},
      // A new tensor over one small storage for every five bytes.
      {"tensors",
       kTensorSetUp + repeated("h\x00h\x01R"s, kOps / 2) + ".",
       {{"a", std::string(16, '\0')}}},
  };
}

TEST(LoadMemory, FloodsHoldAtMostSixteenTimesTheFileSizePlusOneMiB) {
  for (const Flood& flood : floods()) {
    const std::string path = write_archive(flood.name, flood.pickle, flood.records);
    const Measured m = measure_load(path);
    EXPECT_LE(m.peak, bound(file_size(path)))
        << flood.name << ": peak " << m.peak << " bytes, file " << file_size(path);
    // Each flood is refused, by the budget (or for its shape), naming the file.
    EXPECT_NE(m.error.find(path), std::string::npos) << flood.name << ": " << m.error;
    std::remove(path.c_str());
  }
}

TEST(LoadMemory, TheBudgetErrorSaysWhatWasExceeded) {
  const std::string path = write_archive("none_message", "\x80\x02"s + repeated("N", 400000) + ".");
  const Measured m = measure_load(path);
  EXPECT_NE(m.error.find("the pickle's objects and tensor data would take more than the"),
            std::string::npos)
      << m.error;
  EXPECT_NE(m.error.find("(16 times its size of " + std::to_string(file_size(path)) +
                         " bytes, plus 1 MiB, less "),
            std::string::npos)
      << m.error;
  std::remove(path.c_str());
}

/// load_object's value kinds, in floods of the cheapest opcodes that make them, and objects that
/// load but hold many IValues per byte: whether they load or are refused, within the bound.
TEST(LoadMemory, ObjectFloodsHoldAtMostSixteenTimesTheFileSizePlusOneMiB) {
  constexpr int kOps = 400000;
  const std::string proto = "\x80\x02";
  const std::string binfloat = "G"s + std::string(8, '\0');
  // {0: d, 1: d, ...} for one memoized empty dict d: distinct keys, so that the IValue dict
  // holds as many entries as the pickle (the conversion's charges are what keeps it in bounds).
  std::string distinct = proto + "}(K\x00}q\x00"s;
  for (std::uint32_t i = 1; i < static_cast<std::uint32_t>(kOps / 400); ++i) {
    distinct += 'J';
    for (int b = 0; b < 4; ++b) distinct += static_cast<char>(i >> (8 * b));
    distinct += "h\x00"s;
  }
  distinct += "u.";
  const std::vector<Flood> object_floods = {
      {"empty_list", proto + repeated("]", kOps) + ".", {}},
      {"binfloat", proto + repeated(binfloat, kOps) + ".", {}},
      // One list of 400,000 small ints: two bytes of file an item.
      {"appends", proto + "](" + repeated("K\x01", kOps) + "e.", {}},
      // A list holding one memoized empty list again and again.
      {"shared_lists", proto + "]]q\x00a"s + repeated("h\x00a"s, kOps / 3) + ".", {}},
      // {0: None, 1: None, ...}: int keys.
      {"int_keys", proto + "}(" + repeated("J\x01\x02\x03\x04N", kOps / 4) + "u.", {}},
      // Dict items that all refer to one memoized dict.
      {"shared_dicts",
       proto + "}(K\x00}q\x00"s + repeated("J\x01\x02\x03\x04h\x00"s, kOps / 400) + "u.",
       {}},
      {"distinct_int_keys", distinct, {}},
      // A memoized 1 MiB string in a list 200 times: one string, not 200 copies.
      {"shared_long_string",
       proto + "X"s + std::string("\x00\x00\x10\x00", 4) + std::string(1 << 20, 'x') + "q\x00]("s +
           repeated("h\x00"s, 200) + "e.",
       {}},
      // Devices, each a REDUCE of torch.device on a memoized argument tuple.
      {"devices",
       proto + "ctorch\ndevice\nq\x00X\x03\x00\x00\x00"s + "cpu\x85q\x01]("s +
           repeated("h\x00h\x01R"s, kOps / 4) + "e.",
       {}},
  };
  for (const Flood& flood : object_floods) {
    const std::string path = write_archive(flood.name, flood.pickle, flood.records);
    const Measured m = measure_load(path, /*object=*/true);
    EXPECT_LE(m.peak, bound(file_size(path)))
        << flood.name << ": peak " << m.peak << " bytes, file " << file_size(path) << " "
        << m.error;
    // These load: what they hold after the pickle is IValues, which the bound covers too.
    for (const char* loads :
         {"binfloat", "shared_dicts", "distinct_int_keys", "shared_long_string", "devices"}) {
      if (std::string(loads) == flood.name) {
        EXPECT_EQ(m.error, "") << flood.name;
      }
    }
    std::remove(path.c_str());
  }
}

/// Files Python's torch.save wrote (tests/python/oracle_checkpoints.py): the module state dicts
/// with the most objects per byte of file load, within the same bound.
TEST(LoadMemory, PythonFilesOfManyTinyTensorsLoadWithinTheBound) {
  for (const char* name : {"tiny_modules.pt", "many_views.pt", "mlp.pt", "cnn.pt"}) {
    const std::string path = std::string(MODHOOKS_FIXTURES) + "/checkpoints/" + name;
    const Measured m = measure_load(path);
    EXPECT_EQ(m.error, "") << name;
    EXPECT_LE(m.peak, bound(file_size(path))) << name << ": file " << file_size(path);
  }
}

/// `load_state_dict` copies with no copy of the model beside it: 8 x Linear(128, 128) (64 KiB a
/// weight, 520 KiB in all) loads holding less than one weight's size (the load's bookkeeping).
/// With a load post-hook, which may still fail the load after the copies, the former values are
/// kept: the model's size.
TEST(LoadStateDictMemory, ACopyingLoadHoldsNoCopyOfTheModelUnlessAPostHookMayFailIt) {
  torch::nn::Sequential model;
  for (int i = 0; i < 8; ++i) model->push_back(torch::nn::Linear(128, 128));
  modhooks::StateDict sd = modhooks::state_dict(model);
  for (auto& [key, tensor] : sd) tensor = at::randn_like(tensor);
  const std::int64_t model_bytes = 8 * (128 * 128 + 128) * 4;
  const std::int64_t weight_bytes = 128 * 128 * 4;
  for (bool assign : {false, true}) {
    const Measured m = measure([&] { modhooks::load_state_dict(model, sd, true, assign); });
    EXPECT_EQ(m.error, "");
    EXPECT_LT(m.peak, weight_bytes) << "assign " << assign;
  }
  auto post = modhooks::register_load_state_dict_post_hook(
      model, [](torch::nn::Module&, modhooks::IncompatibleKeys&) {});
  const Measured m = measure([&] { modhooks::load_state_dict(model, sd); });
  EXPECT_EQ(m.error, "");
  EXPECT_GE(m.peak, model_bytes);
  post.remove();
}

}  // namespace
