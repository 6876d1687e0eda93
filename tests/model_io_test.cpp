// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/checkpoint/model_io.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_hooks.h"
#include "state/copy_fault.h"  // the fault injection of the load's copies (src/, not installed)
#include "test_util.h"

// libtorch 2.9+ reaches the CUDA caching allocator's statistics through c10's DeviceAllocator,
// without linking libc10_cuda.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#include <c10/core/CachingDeviceAllocator.h>
#define MODHOOKS_TEST_DEVICE_STATS 1
#else
#define MODHOOKS_TEST_DEVICE_STATS 0
#endif

namespace {

namespace fs = std::filesystem;
using modhooks::StateDict;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(32, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 8))) {}
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

/// What tests/python/model_io_check.py's reference() gives.
StateDict reference() {
  StateDict sd;
  sd.insert_or_assign("fc1.weight", (at::arange(64 * 32, at::kFloat) * 0.25).reshape({64, 32}));
  sd.insert_or_assign("fc1.bias", at::arange(64, at::kFloat) - 7);
  sd.insert_or_assign("fc2.weight", (at::arange(8 * 64, at::kFloat) * -0.5).reshape({8, 64}));
  sd.insert_or_assign("fc2.bias", at::arange(8, at::kFloat) * 3);
  return sd;
}

/// Every tensor of `a` equals `b`'s of the same name, bit for bit, and no name is missing.
void expect_same(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, tensor] : a) {
    ASSERT_TRUE(b.contains(key)) << key;
    EXPECT_TRUE(at::equal(tensor, b.find(key)->second)) << key;
  }
}

/// A copy of the model's values, to compare with after a load that must change nothing.
StateDict snapshot(Net& net) {
  StateDict out;
  for (auto& [key, tensor] : modhooks::state_dict(net)) out.insert_or_assign(key, tensor.clone());
  return out;
}

class ModelIo : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("modhooks_model_io_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static int python(const std::string& args) {
    const std::string command = std::string("\"") + MODHOOKS_PYTHON + "\" \"" +
                                MODHOOKS_TEST_SOURCE_DIR + "/python/model_io_check.py\" " + args;
    return std::system(command.c_str());
  }
  fs::path dir_;
};

TEST_F(ModelIo, LoadsWhatPythonWrites) {
  ASSERT_EQ(python("write " + dir_.string()), 0);
  for (const char* name : {"py.safetensors", "py.pt", "py_sharded/model.safetensors.index.json"}) {
    Net net;
    const modhooks::IncompatibleKeys keys = modhooks::load_model(net, path(name));
    EXPECT_TRUE(keys.missing_keys.empty() && keys.unexpected_keys.empty()) << name;
    expect_same(reference(), modhooks::state_dict(net));
  }
}

TEST_F(ModelIo, RoundTripsEveryModuleSpelling) {
  for (const char* name : {"m.safetensors", "m.pt"}) {
    Net source;
    modhooks::save_model(source, path(name));  // a holder
    Net holder;
    const auto version = holder->fc1->weight._version();
    modhooks::load_model(holder, path(name));
    expect_same(modhooks::state_dict(source), modhooks::state_dict(holder));
    // Written as copy_ writes: the version counter moves, as autograd needs.
    EXPECT_GT(holder->fc1->weight._version(), version) << name;
    auto shared = std::make_shared<NetImpl>();
    modhooks::load_model(shared, path(name));
    expect_same(modhooks::state_dict(source), modhooks::state_dict(shared));
    torch::nn::Module& plain = *holder.ptr();
    modhooks::save_model(plain, path(std::string("plain_") + name));
    expect_same(modhooks::state_dict(source), modhooks::load(path(std::string("plain_") + name)));

    torch::jit::Module scripted("Scripted");
    scripted.register_parameter("w", at::zeros({3, 2}), false);
    torch::jit::Module other("Scripted");
    other.register_parameter("w", at::arange(6, at::kFloat).reshape({3, 2}), false);
    modhooks::save_model(other, path(std::string("jit_") + name));
    modhooks::load_model(scripted, path(std::string("jit_") + name));
    EXPECT_TRUE(
        at::equal(scripted.attr("w").toTensor(), at::arange(6, at::kFloat).reshape({3, 2})));
  }
}

TEST_F(ModelIo, ErrorsAreLoadStateDictsNamingTheFile) {
  StateDict sd = reference();
  sd.erase("fc2.bias");
  sd.insert_or_assign("fc3.weight", at::zeros({2}));
  for (const char* name : {"bad.safetensors", "bad.pt"}) {
    modhooks::save(sd, path(name));
    Net net;
    const StateDict before = snapshot(net);
    const std::string expected = expect_error<modhooks::RuntimeError>(
        [&] { modhooks::load_state_dict(net, modhooks::load(path(name))); },
        "state.load.missing_keys");
    EXPECT_EQ(expect_error<modhooks::RuntimeError>([&] { modhooks::load_model(net, path(name)); },
                                                   "state.load.missing_keys"),
              "modhooks::load_model('" + path(name) + "'): " + expected);
    expect_same(before, modhooks::state_dict(net));
    const modhooks::IncompatibleKeys keys = modhooks::load_model(net, path(name), false);
    EXPECT_EQ(keys.missing_keys, std::vector<std::string>{"fc2.bias"});
    EXPECT_EQ(keys.unexpected_keys, std::vector<std::string>{"fc3.weight"});
    EXPECT_TRUE(at::equal(net->fc1->weight, reference().find("fc1.weight")->second));
  }
  // A size mismatch found after other tensors matched: nothing is written.
  StateDict wrong = reference();
  wrong.insert_or_assign("fc2.bias", at::zeros({9}));
  modhooks::save(wrong, path("wrong.safetensors"));
  Net net;
  const StateDict before = snapshot(net);
  EXPECT_ERROR_WITH(modhooks::load_model(net, path("wrong.safetensors")), RuntimeError,
                    "state.load.size_mismatch",
                    "size mismatch for fc2.bias: copying a param with shape torch.Size([9])");
  expect_same(before, modhooks::state_dict(net));
}

/// Flips one byte of the last record of a torch.save file: the bytes of fc2.bias.
void damage_fc2_bias(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const at::Tensor bias = reference().find("fc2.bias")->second;
  const std::string pattern(static_cast<const char*>(bias.data_ptr()), bias.nbytes());
  const std::size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] ^= 0x40;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(ModelIo, ADamagedRecordChangesNothing) {
  modhooks::save(reference(), path("m.pt"));
  damage_fc2_bias(path("m.pt"));
  Net net;
  const StateDict before = snapshot(net);
  EXPECT_ERROR_WITH(modhooks::load_model(net, path("m.pt")), FormatError,
                    "checkpoint.zip.crc_mismatch",
                    "record 'archive/data/3' fails its CRC-32 check (the file is damaged)");
  expect_same(before, modhooks::state_dict(net));  // fc1, before it in the file, too

  modhooks::LoadOptions unchecked;
  unchecked.verify_crc32 = false;
  modhooks::load_model(net, path("m.pt"), true, unchecked);
  EXPECT_TRUE(at::equal(net->fc1->weight, reference().find("fc1.weight")->second));
  EXPECT_FALSE(at::equal(net->fc2->bias, reference().find("fc2.bias")->second));
}

TEST_F(ModelIo, HooksRunAndAFailingPostHookUndoesTheLoad) {
  StateDict old_names;
  for (const auto& [key, tensor] : reference()) old_names.insert_or_assign("old." + key, tensor);
  modhooks::save(old_names, path("old.safetensors"));
  Net net;
  auto rename = modhooks::register_load_state_dict_pre_hook(
      net,
      [](torch::nn::Module&, StateDict& sd, const std::string&, const modhooks::Metadata&, bool,
         std::vector<std::string>&, std::vector<std::string>&, std::vector<std::string>&) {
        StateDict renamed;
        for (const auto& [key, tensor] : sd) renamed.insert_or_assign(key.substr(4), tensor);
        sd.clear();
        for (const auto& [key, tensor] : renamed) sd.insert_or_assign(key, tensor);
      });
  modhooks::load_model(net, path("old.safetensors"));
  expect_same(reference(), modhooks::state_dict(net));

  Net other;
  const StateDict before = snapshot(other);
  int post_calls = 0;
  auto fails = modhooks::register_load_state_dict_post_hook(
      other, [&](torch::nn::Module&, modhooks::IncompatibleKeys&) {
        ++post_calls;
        throw std::runtime_error("post-hook refuses");
      });
  modhooks::save(reference(), path("m.safetensors"));
  EXPECT_THROWS_WITH(modhooks::load_model(other, path("m.safetensors")), "post-hook refuses");
  EXPECT_EQ(post_calls, 1);
  expect_same(before, modhooks::state_dict(other));
}

TEST_F(ModelIo, ACopyThatFailsSaysWhatItWrote) {
  modhooks::save(reference(), path("m.safetensors"));
  const auto fault = [](std::size_t i) {
    if (i == 2) throw std::runtime_error("injected");
  };
  constexpr auto kWrite = modhooks::detail::CopyStage::kWrite;
  {
    // A failure the checks find (here injected into them) fails the load with nothing written.
    Net net;
    const StateDict before = snapshot(net);
    modhooks::detail::CopyFaultGuard guard(fault, modhooks::detail::CopyStage::kCheck);
    EXPECT_ERROR_WITH(modhooks::load_model(net, path("m.safetensors")), RuntimeError,
                      "state.load.copy_failed", "('injected',)");
    expect_same(before, modhooks::state_dict(net));
  }
  {
    // A failure in the writes (the device or the file failing under the copy) says what it wrote.
    Net net;
    const StateDict before = snapshot(net);
    modhooks::detail::CopyFaultGuard guard(fault, kWrite);
    const std::string message = expect_error<modhooks::RuntimeError>(
        [&] { modhooks::load_model(net, path("m.safetensors")); }, "state.load.copy_failed");
    EXPECT_NE(message.find("('injected',)"), std::string::npos) << message;
    EXPECT_NE(message.find("hold the checkpoint's values (\"fc1.weight\", \"fc1.bias\")"),
              std::string::npos)
        << message;
    EXPECT_TRUE(at::equal(net->fc1->weight, reference().find("fc1.weight")->second));
    EXPECT_TRUE(at::equal(net->fc2->weight, before.find("fc2.weight")->second));
  }
  {
    // With a load post-hook the former values are kept, and the failed load is undone.
    Net net;
    auto post = modhooks::register_load_state_dict_post_hook(
        net, [](torch::nn::Module&, modhooks::IncompatibleKeys&) {});
    const StateDict before = snapshot(net);
    modhooks::detail::CopyFaultGuard guard(fault, kWrite);
    EXPECT_ERROR_WITH(modhooks::load_model(net, path("m.safetensors")), RuntimeError,
                      "state.load.copy_failed", "('injected',)");
    expect_same(before, modhooks::state_dict(net));
  }
}

TEST_F(ModelIo, ConvertsDtypesAsCopyDoes) {
  StateDict doubles;
  for (const auto& [key, tensor] : reference())
    doubles.insert_or_assign(key, tensor.to(at::kDouble));
  for (const char* name : {"d.safetensors", "d.pt"}) {
    modhooks::save(doubles, path(name));
    Net net;
    modhooks::load_model(net, path(name));
    expect_same(reference(), modhooks::state_dict(net));
  }
}

TEST_F(ModelIo, NonContiguousParametersAreWrittenAsCopyDoes) {
  StateDict sd;
  sd.insert_or_assign("t", at::arange(12, at::kFloat).reshape({3, 4}));
  for (const char* name : {"t.safetensors", "t.pt"}) {
    modhooks::save(sd, path(name));
    auto module = std::make_shared<torch::nn::Module>();
    const at::Tensor t = module->register_parameter("t", at::zeros({4, 3}).t());
    ASSERT_FALSE(t.is_contiguous());
    modhooks::load_model(module, path(name));
    EXPECT_TRUE(at::equal(t, sd.find("t")->second)) << name;
  }
}

TEST_F(ModelIo, ShardedCheckpointsAreWhatPythonLoaders) {
  Net net;
  {
    at::NoGradGuard no_grad;
    for (auto& [key, tensor] : reference())
      modhooks::state_dict(net).find(key)->second.copy_(tensor);
  }
  modhooks::save_model(net, path("ref.safetensors"));
  // fc1.weight (8 KiB) fills the first shard, the rest the second.
  for (const char* index : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    modhooks::save_model(net, path(index), 8192);
    EXPECT_EQ(python("check " + path(index) + " " + path("ref.safetensors")), 0) << index;
    Net loaded;
    modhooks::load_model(loaded, path(index));
    expect_same(reference(), modhooks::state_dict(loaded));
    expect_same(reference(), modhooks::load(path(index)));
  }
  EXPECT_TRUE(fs::exists(path("model-00001-of-00002.safetensors")));
  EXPECT_TRUE(fs::exists(path("pytorch_model-00002-of-00002.bin")));
  std::ifstream in(path("model.safetensors.index.json"));
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"], (64 * 32 + 64 + 8 * 64 + 8) * 4);
  EXPECT_EQ(index["weight_map"]["fc2.bias"], "model-00002-of-00002.safetensors");
  EXPECT_ERROR_WITH(modhooks::save_model(net, path("model.safetensors.index.json")), ValueError,
                    "checkpoint.save.index_without_shard_size",
                    "an index path needs a max_shard_size");
}

TEST_F(ModelIo, AShardThatFailsChangesNoShard) {
  Net source;
  modhooks::save_model(source, path("model.safetensors.index.json"), 8192);
  {
    // The second shard's header is damaged: the first shard is not loaded either.
    std::fstream shard(path("model-00002-of-00002.safetensors"),
                       std::ios::binary | std::ios::in | std::ios::out);
    shard.seekp(8);
    shard << "[";
  }
  Net net;
  const StateDict before = snapshot(net);
  EXPECT_ERROR_WITH(modhooks::load_model(net, path("model.safetensors.index.json")), FormatError,
                    "checkpoint.safetensors.bad_header",
                    "shard 'model-00002-of-00002.safetensors': safetensors header does not "
                    "start with '{'");
  expect_same(before, modhooks::state_dict(net));

  // The index names a key its shard lacks; a shard holds a key the index does not name.
  modhooks::save_model(source, path("model.safetensors.index.json"), 8192);
  std::ifstream in(path("model.safetensors.index.json"));
  nlohmann::json index = nlohmann::json::parse(in);
  index["weight_map"]["fc9.bias"] = "model-00001-of-00002.safetensors";
  std::ofstream(path("extra.safetensors.index.json")) << index.dump();
  EXPECT_ERROR_WITH(modhooks::load(path("extra.safetensors.index.json")), FormatError,
                    "checkpoint.index.missing_key",
                    "the index maps 'fc9.bias' to shard 'model-00001-of-00002.safetensors', which "
                    "does not hold it");
  index["weight_map"].erase("fc9.bias");
  index["weight_map"].erase("fc2.bias");
  std::ofstream(path("short.safetensors.index.json")) << index.dump();
  EXPECT_ERROR_WITH(modhooks::load_model(net, path("short.safetensors.index.json")), FormatError,
                    "checkpoint.index.unlisted_key",
                    "holds 'fc2.bias', which the index maps to no shard");
  index["weight_map"]["fc2.bias"] = "../model-00002-of-00002.safetensors";
  std::ofstream(path("escape.safetensors.index.json")) << index.dump();
  EXPECT_ERROR_WITH(modhooks::load(path("escape.safetensors.index.json")), FormatError,
                    "checkpoint.index.bad_shard_name", "is not a file name in the index's folder");
  expect_same(before, modhooks::state_dict(net));
}

TEST_F(ModelIo, CudaTargetsGoThroughThePinnedBufferInChunks) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // 40 MiB: three chunks of the 16 MiB staging buffer, the last one partial.
  StateDict sd;
  sd.insert_or_assign("w", at::arange(10 << 20, at::kFloat));
  sd.insert_or_assign("half", at::arange(1000, at::kFloat).to(at::kHalf));
  for (const char* name : {"cuda.safetensors", "cuda.pt"}) {
    modhooks::save(sd, path(name));
    auto module = std::make_shared<torch::nn::Module>();
    module->register_parameter("w", at::zeros({10 << 20}));
    module->register_parameter("half", at::zeros({1000}));  // float32: converted on the way
    module->to(at::kCUDA);
    modhooks::load_model(module, path(name));
    EXPECT_TRUE(at::equal(module->named_parameters()["w"].cpu(), sd.find("w")->second)) << name;
    EXPECT_TRUE(
        at::equal(module->named_parameters()["half"].cpu(), sd.find("half")->second.to(at::kFloat)))
        << name;
  }
}

/// A kB figure of /proc/self/status./// A kB figure of /proc/self/status.
std::int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field) + 1));
  }
  ADD_FAILURE() << field << " not in /proc/self/status";
  return 0;
}

/// Resets VmHWM to the present resident set (Linux's clear_refs "5").
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

/// A model of 192 MiB: three parameters of 64 MiB.
struct BigImpl : torch::nn::Module {
  BigImpl() {
    for (const char* name : {"a", "b", "c"}) {
      register_parameter(name, at::full({16 << 20}, 1.0f));
    }
  }
};
TORCH_MODULE(Big);

TEST_F(ModelIo, PeakMemoryStaysWithin64MiBOfTheModel) {
#if defined(__SANITIZE_THREAD__)
  // TSan's shadow of the 192 MiB the load writes is resident too (four times its size).
  GTEST_SKIP() << "under TSan the resident set measures TSan's shadow memory, not the load";
#endif
  for (const char* name : {"big.safetensors", "big.pt"}) {
    {
      Big source;
      at::NoGradGuard no_grad;
      for (auto& p : source->parameters()) p.fill_(2.5f);
      modhooks::save_model(source, path(name));
    }
    Big net;
    const std::int64_t before = status_kb("VmRSS:");
    reset_peak();
    modhooks::load_model(net, path(name));
    const std::int64_t peak = status_kb("VmHWM:");
    EXPECT_LE(peak - before, 64 * 1024)
        << name << ": the load held " << (peak - before) << " kB beside the model";
    for (auto& p : net->parameters()) EXPECT_EQ(p[12345].item<float>(), 2.5f);
    fs::remove(path(name));
  }
}

/// The bytes the CUDA caching allocator holds for tensors on cuda:0 beyond what it held when
/// this was made: `peak()` is the most at any moment since. Skips the test where no CUDA device
/// is present or this libtorch has no DeviceAllocator (before 2.9).
class DeviceMemory {
 public:
  DeviceMemory() {
#if MODHOOKS_TEST_DEVICE_STATS
    torch::cuda::synchronize();
    allocator()->resetPeakStats(0);
    start_ = bytes().current;
#endif
  }
  std::int64_t peak() const {
#if MODHOOKS_TEST_DEVICE_STATS
    torch::cuda::synchronize();
    return bytes().peak - start_;
#else
    return 0;
#endif
  }
  /// Empty when the figures can be read, else why not.
  static std::string unavailable() {
    if (!torch::cuda::is_available()) return "no CUDA device";
    if (!MODHOOKS_TEST_DEVICE_STATS) return "libtorch before 2.9 has no c10::DeviceAllocator";
    return "";
  }

 private:
#if MODHOOKS_TEST_DEVICE_STATS
  static c10::DeviceAllocator* allocator() { return c10::getDeviceAllocator(c10::kCUDA); }
  static c10::CachingAllocator::Stat bytes() {
    return allocator()
        ->getDeviceStats(0)
        .allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  }
  std::int64_t start_ = 0;
#endif
};

/// A model on cuda:0 of three float tensors of 24, 8 and 4 MiB, all zeros; `expected()` is the
/// checkpoint written for it, with `c` stored as half (converted on the way in).
std::shared_ptr<torch::nn::Module> cuda_model() {
  auto module = std::make_shared<torch::nn::Module>();
  module->register_parameter("a", at::zeros({6 << 20}));
  module->register_parameter("b", at::zeros({2 << 20}));
  module->register_parameter("c", at::zeros({1 << 20}));
  module->to(at::kCUDA);
  return module;
}
StateDict cuda_model_checkpoint() {
  StateDict sd;
  sd.insert_or_assign("a", at::arange(6 << 20, at::kFloat));
  sd.insert_or_assign("b", at::arange(2 << 20, at::kFloat) * -0.5);
  sd.insert_or_assign("c", (at::arange(1 << 20, at::kFloat).remainder(2048)).to(at::kHalf));
  return sd;
}
constexpr std::int64_t kLargestTensorBytes = std::int64_t{24} << 20;

void expect_loaded(torch::nn::Module& module, const StateDict& sd, const std::string& what) {
  auto params = module.named_parameters();
  for (const auto& [key, tensor] : sd) {
    EXPECT_TRUE(params[key].is_cuda()) << what << ": " << key;
    EXPECT_TRUE(at::equal(params[key].cpu(), tensor.to(at::kFloat))) << what << ": " << key;
  }
}

TEST_F(ModelIo, CudaLoadHoldsAtMostTheLargestTensorOnTheDevice) {
  if (const std::string why = DeviceMemory::unavailable(); !why.empty()) GTEST_SKIP() << why;
  const StateDict sd = cuda_model_checkpoint();
  for (const char* name : {"peak.safetensors", "peak.pt"}) {
    modhooks::save(sd, path(name));
    auto module = cuda_model();
    std::vector<const void*> storage;
    for (const auto& p : module->parameters()) storage.push_back(p.data_ptr());
    const DeviceMemory memory;
    modhooks::load_model(module, path(name));
    EXPECT_LE(memory.peak(), kLargestTensorBytes)
        << name << ": the load held " << memory.peak() << " bytes on the device beside the model";
    expect_loaded(*module, sd, name);
    // Written where the parameters are, as load_state_dict's copy_ does.
    std::size_t i = 0;
    for (const auto& p : module->parameters()) EXPECT_EQ(p.data_ptr(), storage[i++]) << name;
  }
}

TEST_F(ModelIo, CpuCheckpointIntoACudaModelWithLoadStateDict) {
  if (const std::string why = DeviceMemory::unavailable(); !why.empty()) GTEST_SKIP() << why;
  const StateDict sd = cuda_model_checkpoint();
  modhooks::save(sd, path("cpu.pt"));
  const StateDict loaded = modhooks::load(path("cpu.pt"));
  for (const auto& [key, tensor] : loaded) ASSERT_TRUE(tensor.is_cpu()) << key;
  auto module = cuda_model();
  {
    const DeviceMemory memory;
    modhooks::load_state_dict(module, loaded);
    // The former values wait on the host: no second copy of the model on the device.
    EXPECT_LE(memory.peak(), kLargestTensorBytes)
        << "load_state_dict held " << memory.peak() << " bytes on the device beside the model";
  }
  expect_loaded(*module, sd, "load_state_dict");

  // A post-hook that throws puts the CUDA tensors back from their host copies.
  auto other = cuda_model();
  {
    at::NoGradGuard no_grad;
    for (auto& p : other->parameters()) p.fill_(3.0f);
  }
  auto fails = modhooks::register_load_state_dict_post_hook(
      other, [](torch::nn::Module&, modhooks::IncompatibleKeys&) {
        throw std::runtime_error("post-hook refuses");
      });
  EXPECT_THROWS_WITH(modhooks::load_state_dict(other, loaded), "post-hook refuses");
  for (const auto& item : other->named_parameters()) {
    EXPECT_TRUE(item.value().is_cuda()) << item.key();
    EXPECT_TRUE(at::equal(item.value().cpu(), at::full_like(item.value().cpu(), 3.0f)))
        << item.key() << " was not put back";
  }
}

/// Whether `p` lies in a mapping of `file` (/proc/self/maps).
bool in_mapping_of(const void* p, const std::string& file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(maps, line)) {
    if (line.find(file) == std::string::npos) continue;
    std::uintptr_t begin = 0, end = 0;
    std::sscanf(line.c_str(), "%lx-%lx", &begin, &end);
    if (address >= begin && address < end) return true;
  }
  return false;
}

TEST_F(ModelIo, MappedLoadReadsTheHeaderOnlyAndKeepsTheMappingWithTheTensors) {
  StateDict sd;
  sd.insert_or_assign("small", at::arange(10, at::kFloat));
  sd.insert_or_assign("big", at::full({32 << 20}, 1.5f));  // 128 MiB
  for (const char* name : {"mapped.safetensors", "mapped.pt"}) {
    modhooks::save(sd, path(name));
    modhooks::LoadOptions options;
    options.mmap = true;
    const std::int64_t before = status_kb("VmRSS:");
    reset_peak();
    StateDict loaded = modhooks::load(path(name), options);
    EXPECT_LE(status_kb("VmHWM:") - before, 8 * 1024) << name << ": the load read the data";
    at::Tensor big = loaded.find("big")->second;
    EXPECT_TRUE(in_mapping_of(big.data_ptr(), path(name))) << name;
    EXPECT_TRUE(in_mapping_of(loaded.find("small")->second.data_ptr(), path(name))) << name;
    // The mapping outlives the file's name and the state dict: it goes with the last storage.
    fs::remove(path(name));
    loaded.clear();
    EXPECT_TRUE(at::equal(big, sd.find("big")->second)) << name;
    EXPECT_EQ(big[1000].item<float>(), 1.5f);
    const void* data = big.data_ptr();
    EXPECT_TRUE(in_mapping_of(data, path(name)));
    big.reset();  // the last tensor viewing the mapping
    EXPECT_FALSE(in_mapping_of(data, path(name))) << name << ": the mapping outlived its tensors";
  }
}

TEST_F(ModelIo, MappedTensorsAreReadOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  StateDict sd;
  sd.insert_or_assign("w", at::arange(1024, at::kFloat));
  modhooks::save(sd, path("ro.safetensors"));
  modhooks::LoadOptions options;
  options.mmap = true;
  EXPECT_DEATH(
      {
        const StateDict loaded = modhooks::load(path("ro.safetensors"), options);
        // The dying process (a re-run of this test) leaves no folder behind; the mapping stays.
        fs::remove_all(dir_);
        at::Tensor w = loaded.find("w")->second;
        w.add_(1);
      },
      "");
  // Without the mapping the same tensor is writable.
  const StateDict loaded = modhooks::load(path("ro.safetensors"));
  at::Tensor w = loaded.find("w")->second;
  w.add_(1);
  EXPECT_EQ(w[3].item<float>(), 4.0f);
}

}  // namespace
