// SPDX-License-Identifier: BSD-3-Clause
// modhooks::probe::PrecisionDebugger: dumps in msprobe's format. msprobe itself is the oracle:
// tests/python/probe_oracle.py runs msprobe's Python dump of the same models, weights and
// inputs, and msprobe's compare must match every row of the C++ dump and pass it.
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <sys/wait.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "modhooks/modhooks.h"
#include "modhooks/probe.h"
#include "probe_files.h"
#include "test_util.h"

namespace mp = modhooks::probe;
namespace fs = std::filesystem;

namespace {

using probe_files::read_json;
using probe_files::read_text;
using probe_files::run;
using probe_files::step_folder;

// The models of probe_oracle.py, registered in the same order so named_modules() agree.
struct MLPImpl : torch::nn::Module {
  MLPImpl()
      : fc1(register_module("fc1", modhooks::nn::Linear(4, 8))),
        act(register_module("act", modhooks::nn::ReLU())),
        fc2(register_module("fc2", modhooks::nn::Linear(8, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(act(fc1(x))); }
  modhooks::nn::Linear fc1;
  modhooks::nn::ReLU act;
  modhooks::nn::Linear fc2;
};
TORCH_MODULE(MLP);

namespace skewed {
/// A port's bug that a glance misses: a module named ReLU (its class `ReLUImpl`, as libtorch's)
/// that computes leaky_relu. probe_oracle.py's SkewedReLU is the same in Python.
struct ReLUImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return torch::leaky_relu(x, 0.1); }
};
TORCH_MODULE(ReLU);
}  // namespace skewed

/// The MLP with `act` skewed (probe_oracle.py's skew "act").
struct SkewedMLPImpl : torch::nn::Module {
  SkewedMLPImpl()
      : fc1(register_module("fc1", modhooks::nn::Linear(4, 8))),
        act(register_module("act", skewed::ReLU())),
        fc2(register_module("fc2", modhooks::nn::Linear(8, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(modhooks::call(act, fc1(x))); }
  modhooks::nn::Linear fc1;
  skewed::ReLU act;
  modhooks::nn::Linear fc2;
};
TORCH_MODULE(SkewedMLP);

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : fc(register_module("fc", modhooks::nn::Linear(3, 3))),
        act(register_module("act", modhooks::nn::Tanh())) {}
  at::Tensor forward(const at::Tensor& x) { return act(fc(x)); }
  modhooks::nn::Linear fc;
  modhooks::nn::Tanh act;
};
TORCH_MODULE(Block);

struct NestedImpl : torch::nn::Module {
  NestedImpl()
      : shared(register_module("shared", modhooks::nn::Linear(3, 3))),
        block(register_module("block", Block())),
        seq(register_module(
            "seq", modhooks::Sequential(modhooks::nn::Linear(3, 2), modhooks::nn::ReLU()))) {}
  at::Tensor forward(const at::Tensor& x) {
    return modhooks::call(seq, shared(modhooks::call(block, shared(x))));
  }
  modhooks::nn::Linear shared;
  Block block;
  modhooks::Sequential seq;
};
TORCH_MODULE(Nested);

/// probe_oracle.py's InPlace: torchvision ResNet's in-place operations on hooked modules'
/// tensors (a ReLU(inplace=True) on a Linear's output, `out += identity` on another's, the ReLU
/// called twice).
struct InPlaceImpl : torch::nn::Module {
  InPlaceImpl()
      : fc1(register_module("fc1", modhooks::nn::Linear(4, 4))),
        relu(register_module("relu", modhooks::nn::ReLU(torch::nn::ReLUOptions().inplace(true)))),
        fc2(register_module("fc2", modhooks::nn::Linear(4, 4))),
        head(register_module("head", modhooks::nn::Linear(4, 3))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = relu(fc1(x));
    out = fc2(out);
    out += x;
    out = relu(out);
    return head(out);
  }
  modhooks::nn::Linear fc1;
  modhooks::nn::ReLU relu;
  modhooks::nn::Linear fc2, head;
};
TORCH_MODULE(InPlace);

const std::string kFixtures = MODHOOKS_PROBE_FIXTURES;
const std::string kOracle = std::string(MODHOOKS_TEST_SOURCE_DIR) + "/python/probe_oracle.py";

/// probe_oracle.py's training: two steps of SGD, the optimizer stepping after debugger.step().
/// `skew` changes the model after its weights are loaded, as the oracle's SKEWS do.
template <class Model>
void train(Model& model, const std::string& name, mp::PrecisionDebugger& debugger,
           const std::function<void(Model&)>& skew = nullptr) {
  modhooks::load_state_dict(model, modhooks::load(kFixtures + "/" + name + ".pt"));
  if (skew) skew(model);
  const c10::IValue inputs = modhooks::load_object(kFixtures + "/" + name + "_inputs.pt");
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 2; ++step) {
    debugger.start(model);
    const at::Tensor x = inputs.toGenericDict().at("x" + std::to_string(step)).toTensor();
    at::Tensor loss = modhooks::call(model, x).pow(2).mean();
    loss.backward();
    debugger.stop();
    debugger.step();
    opt.step();
    opt.zero_grad();
  }
}

/// The same training of the model Python scripted or traced (probe_oracle.py's
/// `<name>_scripted.pt`, `<name>_traced.pt`; `how`: "scripted" or "traced").
void train_torchscript(const std::string& name, const std::string& how,
                       mp::PrecisionDebugger& debugger) {
  // Without TorchScript's graph optimizer the model runs eager's kernels, so its CRCs are
  // Python's; with it, step 1's gradients differ in the last bits.
  const torch::jit::GraphOptimizerEnabledGuard no_fusion(false);
  torch::jit::Module model = torch::jit::load(kFixtures + "/" + name + "_" + how + ".pt");
  const c10::IValue inputs = modhooks::load_object(kFixtures + "/" + name + "_inputs.pt");
  std::vector<at::Tensor> params;
  for (const at::Tensor& param : model.parameters()) params.push_back(param);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 2; ++step) {
    debugger.start(model);
    const at::Tensor x = inputs.toGenericDict().at("x" + std::to_string(step)).toTensor();
    at::Tensor loss = modhooks::call(model, {x}).toTensor().pow(2).mean();
    loss.backward();
    debugger.stop();
    debugger.step();
    opt.step();
    opt.zero_grad();
  }
}

/// A fresh folder for one test.
std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "probe_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

mp::Config l0_config(const std::string& dump_path, const std::string& task = "statistics") {
  mp::Config config;
  config.level = "L0";
  config.task = task;
  config.dump_path = dump_path;
  return config;
}

}  // namespace

// ---- against msprobe

/// model (with "_scripted" or "_traced": the C++ side runs the TorchScript model Python scripted
/// or traced, against msprobe's eager run), task, summary_mode
using Variant = std::tuple<std::string, std::string, std::string>;

class ProbeAgainstMsprobe : public ::testing::TestWithParam<Variant> {};

namespace {

/// The oracle's `dump` (msprobe's own run in Python) of `model_name`, optionally skewed.
std::pair<int, std::string> python_dump(const std::string& model_name,
                                        const std::string& config_path,
                                        const std::string& skew = "") {
  return run(std::string(MODHOOKS_PYTHON) + " " + kOracle + " dump " + kFixtures + " " +
             model_name + " " + config_path + (skew.empty() ? "" : " " + skew));
}

/// "<major>.<minor>" of the libtorch this test runs on, for the oracle's CRC rule.
std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

}  // namespace

TEST_P(ProbeAgainstMsprobe, CompareMatchesAndPassesEveryRow) {
  const auto& [variant, task, summary_mode] = GetParam();
  const std::string model_name = variant.substr(0, variant.find('_'));
  const std::string torchscript =
      variant == model_name ? "" : variant.substr(model_name.size() + 1);
  const std::string dir = fresh_dir(variant + "_" + task + "_" + summary_mode);
  const std::string config_path =
      probe_files::write_config(dir + "/config.json", dir + "/python", task, summary_mode);

  const auto [golden_status, golden_log] = python_dump(model_name, config_path);
  if (golden_status == 77) GTEST_SKIP() << "msprobe is not installed: " << golden_log;
  ASSERT_EQ(golden_status, 0) << golden_log;

  mp::Config config = mp::Config::from_file(config_path);
  config.dump_path = dir + "/cpp";
  {
    mp::PrecisionDebugger debugger(config);
    if (!torchscript.empty()) {
      train_torchscript(model_name, torchscript, debugger);
    } else if (model_name == "mlp") {
      MLP model;
      train(model, model_name, debugger);
    } else if (model_name == "inplace") {
      InPlace model;
      train(model, model_name, debugger);
    } else {
      Nested model;
      train(model, model_name, debugger);
    }
  }
  const auto [status, log] =
      probe_files::compare_steps(MODHOOKS_PYTHON, kOracle, libtorch_version(), dir, 2);
  if (status == 77) GTEST_SKIP() << "msprobe is not installed: " << log;
  EXPECT_EQ(status, 0) << log;
  std::cout << log.substr(log.rfind("== ")) << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    , ProbeAgainstMsprobe,
    ::testing::Values(Variant{"mlp", "statistics", "statistics"},
                      Variant{"mlp", "statistics", "md5"}, Variant{"mlp", "tensor", ""},
                      Variant{"nested", "statistics", "statistics"},
                      Variant{"nested", "statistics", "md5"}, Variant{"nested", "tensor", ""},
                      Variant{"mlp_scripted", "statistics", "md5"},
                      Variant{"nested_scripted", "statistics", "statistics"},
                      Variant{"nested_scripted", "statistics", "md5"},
                      Variant{"nested_scripted", "tensor", ""},
                      Variant{"nested_traced", "statistics", "md5"},
                      Variant{"inplace", "statistics", "statistics"},
                      Variant{"inplace", "statistics", "md5"}, Variant{"inplace", "tensor", ""}),
    [](const ::testing::TestParamInfo<Variant>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) +
             (std::get<2>(info.param).empty() ? "" : "_" + std::get<2>(info.param));
    });

// ---- a C++ model that computes one module otherwise, against msprobe

/// skew (probe_oracle.py's SKEWS), task, summary_mode, and in md5 mode the first row compare
/// must mark: the skewed module's, every row before it passing. Built against another libtorch
/// than Python's (Debian's 1.13), whose kernels round otherwise, the md5 cases skip and the others
/// check only that every row matches: compare's verdicts near its thresholds follow the last bits.
using Skew = std::tuple<std::string, std::string, std::string, std::string>;

class ProbeSkewAgainstMsprobe : public ::testing::TestWithParam<Skew> {};

TEST_P(ProbeSkewAgainstMsprobe, CompareMarksTheModuleAsForTwoPythonRuns) {
  const auto& [skew, task, summary_mode, first_marked] = GetParam();
  const std::string model_name = skew == "act" ? "mlp" : "nested";
  const std::string dir = fresh_dir("skew_" + skew + "_" + task + "_" + summary_mode);
  // msprobe's dump of the model in Python, and of the same model skewed as the C++ one is.
  const auto golden = python_dump(
      model_name,
      probe_files::write_config(dir + "/golden.json", dir + "/golden", task, summary_mode));
  if (golden.first == 77) GTEST_SKIP() << "msprobe is not installed: " << golden.second;
  ASSERT_EQ(golden.first, 0) << golden.second;
  const std::string skewed_config =
      probe_files::write_config(dir + "/skewed.json", dir + "/python_skewed", task, summary_mode);
  const auto skewed = python_dump(model_name, skewed_config, skew);
  ASSERT_EQ(skewed.first, 0) << skewed.second;

  mp::Config config = mp::Config::from_file(skewed_config);
  config.dump_path = dir + "/cpp";
  {
    mp::PrecisionDebugger debugger(config);
    if (skew == "act") {
      SkewedMLP model;
      train(model, model_name, debugger);
    } else {
      Nested model;
      train<Nested>(model, model_name, debugger, [](Nested& m) {
        torch::NoGradGuard no_grad;
        m->block->fc->weight[0][0] += 1e-2;  // Python's `weight[0, 0] += 1e-2`
      });
    }
  }
  std::string triples;
  for (int step = 0; step < 2; ++step) {
    for (const char* run_dir : {"/cpp", "/golden", "/python_skewed"}) {
      triples += " " + step_folder(dir + run_dir, step) + "/dump.json";
    }
  }
  const auto [status, log] = run(std::string(MODHOOKS_PYTHON) + " " + kOracle + " marks " +
                                 libtorch_version() + " " + dir + triples);
  if (status == 78) {
    GTEST_SKIP() << log.substr(log.rfind('\n', log.size() - 2) + 1);
  }
  ASSERT_EQ(status, 0) << log;  // every row matched, marked as msprobe marks the Python skew
  const auto at = log.find("first marked: ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string marked = log.substr(at + 14, log.find('\n', at) - at - 14);
  if (!first_marked.empty()) {
    EXPECT_EQ(marked, first_marked) << log;
  }
  std::cout << "step 0's first marked row: " << marked << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    , ProbeSkewAgainstMsprobe,
    ::testing::Values(Skew{"act", "statistics", "md5", "Module.act.ReLU.forward.0.output.0"},
                      Skew{"act", "statistics", "statistics", ""}, Skew{"act", "tensor", "", ""},
                      Skew{"weight", "statistics", "md5",
                           "Module.block.fc.Linear.forward.0.parameters.weight"},
                      Skew{"weight", "statistics", "statistics", ""},
                      Skew{"weight", "tensor", "", ""}),
    [](const ::testing::TestParamInfo<Skew>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) +
             (std::get<2>(info.param).empty() ? "" : "_" + std::get<2>(info.param));
    });

// ---- the format, without msprobe

TEST(ProbeDebugger, NamesAreMsprobes) {
  const std::string dir = fresh_dir("names");
  Nested model;
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    debugger.start(model);
    modhooks::call(model, torch::randn({2, 3})).sum().backward();
    debugger.stop();
    debugger.step();
  }
  const std::string folder = step_folder(dir, 0);
  EXPECT_EQ(fs::path(folder).filename().string().rfind("proc", 0), 0U) << folder;
  const auto dump = read_json(folder + "/dump.json");
  std::vector<std::string> names;
  for (const auto& item : dump["data"].items()) names.push_back(item.key());
  // What msprobe 26.2.0 wrote for the same model in Python: children before parents, backward
  // in execution order, a parameter's gradient when its accumulator ran.
  const std::vector<std::string> expected = {"Module.shared.Linear.forward.0",
                                             "Module.block.fc.Linear.forward.0",
                                             "Module.block.act.Tanh.forward.0",
                                             "Module.block.Block.forward.0",
                                             "Module.shared.Linear.forward.1",
                                             "Module.seq.0.Linear.forward.0",
                                             "Module.seq.1.ReLU.forward.0",
                                             "Module.seq.Sequential.forward.0",
                                             "Module.seq.1.ReLU.backward.0",
                                             "Module.seq.0.Linear.parameters_grad.0",
                                             "Module.seq.0.Linear.backward.0",
                                             "Module.seq.Sequential.backward.0",
                                             "Module.shared.Linear.backward.1",
                                             "Module.block.act.Tanh.backward.0",
                                             "Module.block.fc.Linear.parameters_grad.0",
                                             "Module.block.fc.Linear.backward.0",
                                             "Module.block.Block.backward.0",
                                             "Module.shared.Linear.backward.0",
                                             "Module.shared.Linear.parameters_grad.0"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(dump["task"], "statistics");
  EXPECT_EQ(dump["level"], "L0");
  EXPECT_EQ(dump["framework"], "pytorch");
  EXPECT_TRUE(dump["dump_data_dir"].is_null());
  const auto construct = read_json(folder + "/construct.json");
  EXPECT_EQ(construct["Module.block.fc.Linear.forward.0"], "Module.block.Block.forward.0");
  EXPECT_TRUE(construct["Module.shared.Linear.forward.1"].is_null());
  EXPECT_EQ(construct["Module.seq.0.Linear.backward.0"], "Module.seq.Sequential.backward.0");
  EXPECT_TRUE(fs::exists(folder + "/stack.json"));
}

TEST(ProbeDebugger, RecordsKeepMsprobesTraps) {
  const std::string dir = fresh_dir("traps");
  MLP model;
  {
    mp::Config config = l0_config(dir);
    config.summary_mode = "md5";
    mp::PrecisionDebugger debugger(config);
    debugger.start(model);
    modhooks::call(model, torch::randn({2, 4})).sum().backward();
    debugger.stop();
    debugger.step();
  }
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  const auto& fc1 = data["Module.fc1.Linear.forward.0"];
  const auto& input = fc1["input_args"][0];
  std::vector<std::string> keys;
  for (const auto& item : input.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"type", "dtype", "shape", "Max", "Min", "Mean", "Norm",
                                            "requires_grad", "md5"}));
  EXPECT_EQ(input["dtype"], "torch.float32");  // str(dtype), never "Float"
  EXPECT_EQ(input["requires_grad"], false);    // as the tensor has it
  EXPECT_EQ(fc1["output"][0]["requires_grad"], true);
  EXPECT_EQ(fc1["parameters"]["weight"]["requires_grad"], true);
  EXPECT_EQ(input["md5"].get<std::string>().size(), 8U);
  // The first module's input needs no gradient: its backward has no "output" records.
  EXPECT_TRUE(data["Module.fc1.Linear.backward.0"]["output"].empty());
  EXPECT_EQ(data["Module.fc1.Linear.parameters_grad.0"]["weight"][0]["shape"],
            (std::vector<int64_t>{8, 4}));
}

TEST(ProbeDebugger, TensorFilesAreNamedAsMsprobesAndHoldTheTensor) {
  const std::string dir = fresh_dir("tensor_files");
  MLP model;
  const at::Tensor x = torch::randn({2, 4});
  {
    mp::PrecisionDebugger debugger(l0_config(dir, "tensor"));
    debugger.start(model);
    modhooks::call(model, x).sum().backward();
    debugger.stop();
    debugger.step();
  }
  const std::string folder = step_folder(dir, 0);
  const auto dump = read_json(folder + "/dump.json");
  EXPECT_EQ(dump["dump_data_dir"], folder + "/dump_tensor_data");
  const auto& fc1 = dump["data"]["Module.fc1.Linear.forward.0"];
  EXPECT_EQ(fc1["input_args"][0]["data_name"], "Module.fc1.Linear.forward.0.input.0.pt");
  EXPECT_EQ(fc1["parameters"]["bias"]["data_name"],
            "Module.fc1.Linear.forward.0.parameters.bias.pt");
  EXPECT_EQ(dump["data"]["Module.fc1.Linear.parameters_grad.0"]["bias"][0]["data_name"],
            "Module.fc1.Linear.parameters_grad.0.bias.pt");
  const c10::IValue saved =
      modhooks::load_object(folder + "/dump_tensor_data/Module.fc1.Linear.forward.0.input.0.pt");
  ASSERT_TRUE(saved.isTensor());
  EXPECT_TRUE(saved.toTensor().equal(x));
  // Python's torch.load(weights_only=True) reads it, as compare does.
  const auto [status, log] =
      run(std::string(MODHOOKS_PYTHON) +
          " -c \"import torch,sys; t = torch.load(sys.argv[1], "
          "weights_only=True); assert t.shape == (2, 4), t\" " +
          folder + "/dump_tensor_data/Module.fc1.Linear.forward.0.input.0.pt");
  EXPECT_EQ(status, 0) << log;
}

TEST(ProbeDebugger, EveryTensorFileIsOnDiskWhenStepReturnsWithinTheMemoryBound) {
  // With the default bound the writer lags behind the hooks; with one byte each hook waits
  // until the file before is written.
  for (const std::size_t bound : {mp::Config().max_pending_bytes, std::size_t{1}}) {
    const std::string dir = fresh_dir("tensor_bound_" + std::to_string(bound));
    MLP model;
    mp::Config config = l0_config(dir, "tensor");
    config.max_pending_bytes = bound;
    mp::PrecisionDebugger debugger(config);
    for (int step = 0; step < 2; ++step) {
      debugger.start(model);
      modhooks::call(model, torch::randn({64, 4})).sum().backward();
      debugger.stop();
      debugger.step();
      const std::string folder = step_folder(dir, step);
      std::size_t named = 0;
      std::function<void(const nlohmann::ordered_json&)> count = [&](const auto& value) {
        if (value.is_object() && value.contains("data_name")) {
          ++named;
          const std::string file =
              folder + "/dump_tensor_data/" + value["data_name"].template get<std::string>();
          EXPECT_TRUE(modhooks::load_object(file).isTensor()) << file;
        } else if (value.is_structured()) {
          for (const auto& item : value) count(item);
        }
      };
      count(read_json(folder + "/dump.json")["data"]);
      EXPECT_GT(named, 15U);
      std::size_t files = 0;
      for ([[maybe_unused]] const auto& entry :
           fs::directory_iterator(folder + "/dump_tensor_data")) {
        ++files;
      }
      EXPECT_EQ(files, named) << "a file left over or missing in step " << step;
    }
  }
}

/// Each file holds its own tensor while the writer reuses the buffers of written files for later
/// copies of the same size, within one step and across steps, and under a bound that lets it
/// keep one buffer.
TEST(ProbeDebugger, TensorFilesHoldTheirOwnValuesWhileBuffersAreReused) {
  for (const std::size_t bound : {std::size_t{512} << 20, std::size_t{4000}}) {
    const std::string dir = fresh_dir("reuse_" + std::to_string(bound));
    mp::Config config = l0_config(dir, "tensor");
    config.max_pending_bytes = bound;
    auto seq = modhooks::Sequential(modhooks::nn::Identity());
    mp::PrecisionDebugger debugger(config);
    for (int step = 0; step < 2; ++step) {
      debugger.start(seq);
      for (int i = 0; i < 12; ++i) {
        modhooks::call(seq, torch::full({1000}, static_cast<float>(100 * step + i)));
      }
      debugger.stop();
      debugger.step();
    }
    for (int step = 0; step < 2; ++step) {
      const std::string tensors = step_folder(dir, step) + "/dump_tensor_data/";
      for (int i = 0; i < 12; ++i) {
        const std::string name = "Module.0.Identity.forward." + std::to_string(i) + ".input.0.pt";
        const at::Tensor file = modhooks::load_object(tensors + name).toTensor();
        EXPECT_TRUE(file.equal(torch::full({1000}, static_cast<float>(100 * step + i))))
            << bound << " " << step << " " << name << ": " << file[0].item<float>();
      }
    }
  }
}

TEST(ProbeDebugger, AFullDiskFailsStepNamingTheFileAndTrainingGoesOn) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to stand for a full disk";
  const std::string dir = fresh_dir("full_disk");
  torch::manual_seed(4);
  MLP model;
  MLP twin;
  modhooks::load_state_dict(twin, modhooks::state_dict(model));
  const at::Tensor x = torch::randn({5, 4});
  mp::PrecisionDebugger debugger(l0_config(dir, "tensor"));
  debugger.start(model);
  // fc2's output goes to a full disk: the file it is written through first is /dev/full.
  const std::string tensors = step_folder(dir, 0) + "/dump_tensor_data/";
  const std::string name = "Module.fc2.Linear.forward.0.output.0.pt";
  fs::create_symlink("/dev/full", tensors + name + ".modhooks-partial");
  modhooks::call(model, x).pow(2).mean().backward();
  debugger.stop();
  try {
    debugger.step();
    ADD_FAILURE() << "step() did not fail";
  } catch (const modhooks::Error& e) {
    EXPECT_STREQ(e.id(), "probe.dump.write_failed");
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tensors + name));
  EXPECT_FALSE(fs::exists(tensors + name + ".modhooks-partial"));
  EXPECT_TRUE(fs::exists(tensors + "Module.fc1.Linear.forward.0.output.0.pt"));
  // Training went on as without the debugger, and so does the debugger.
  modhooks::call(twin, x).pow(2).mean().backward();
  const auto grads = twin->named_parameters();
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(item.value().grad().equal(grads[item.key()].grad())) << item.key();
  }
  debugger.step();
  debugger.start(model);
  modhooks::call(model, x);
  debugger.stop();
  debugger.step();
  EXPECT_TRUE(fs::exists(step_folder(dir, 1) + "/dump_tensor_data/" + name));
}

/// A debugger destroyed before the step() that would raise a file it could not write warns of
/// it, naming the file.
TEST(ProbeDebugger, ADebuggerDestroyedBeforeStepWarnsOfAFileItCouldNotWrite) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to stand for a full disk";
  const std::string dir = fresh_dir("full_disk_destroyed");
  MLP model;
  const std::string name = "Module.fc2.Linear.forward.0.output.0.pt";
  WarningCapture warnings;
  {
    mp::PrecisionDebugger debugger(l0_config(dir, "tensor"));
    debugger.start(model);
    fs::create_symlink("/dev/full",
                       step_folder(dir, 0) + "/dump_tensor_data/" + name + ".modhooks-partial");
    modhooks::call(model, torch::randn({5, 4}));
    debugger.stop();
  }
  ASSERT_EQ(warnings.messages.size(), 1U);
  EXPECT_NE(warnings.messages[0].find(name), std::string::npos) << warnings.messages[0];
}

TEST(ProbeDebugger, DtypesAndNonFiniteValuesAreWrittenAsMsprobeWrites) {
  const std::string dir = fresh_dir("dtypes");
  auto seq = modhooks::Sequential(modhooks::nn::Identity());
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    debugger.start(seq);
    modhooks::call(seq, torch::tensor({1.0, 2.0}, at::kDouble));
    modhooks::call(seq, torch::tensor({3, -4}, at::kLong));
    modhooks::call(seq, torch::tensor({true, false}));
    modhooks::call(seq, torch::tensor({1.0F, std::nanf("")}));
    modhooks::call(seq, torch::tensor({1.0F, INFINITY, -INFINITY}));
    debugger.stop();
    debugger.step();
  }
  const std::string folder = step_folder(dir, 0);
  const auto data = read_json(folder + "/dump.json")["data"];
  const auto& f64 = data["Module.0.Identity.forward.0"]["input_args"][0];
  EXPECT_EQ(f64["dtype"], "torch.float64");
  EXPECT_EQ(f64["Max"], 2.0);
  EXPECT_TRUE(f64["Mean"].is_null());
  const auto& i64 = data["Module.0.Identity.forward.1"]["input_args"][0];
  EXPECT_EQ(i64["dtype"], "torch.int64");
  EXPECT_EQ(i64["Min"], -4);
  EXPECT_TRUE(i64["Norm"].is_null());
  const auto& b = data["Module.0.Identity.forward.2"]["input_args"][0];
  EXPECT_EQ(b["dtype"], "torch.bool");
  EXPECT_EQ(b["Max"], true);
  EXPECT_EQ(b["Min"], false);
  const std::string text = read_text(folder + "/dump.json");
  // Python's tokens, not null: NaN propagates through max, min, mean and norm.
  EXPECT_NE(text.find("\"Max\": NaN,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"Max\": Infinity,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"Min\": -Infinity,\n"), std::string::npos) << text;
}

/// Each tensor's Max, Min, Mean and Norm are torch's own (`max`, `min`, `mean`, `norm`) to the bit,
/// whichever way the debugger takes them: float tensors of sizes around its lanes, with NaN and
/// infinities, every value negative, one element, a transposed view, a negative view (whose bytes
/// are not its values), and the half precisions.
TEST(ProbeDebugger, StatisticsAreTorchsToTheBit) {
  const std::string dir = fresh_dir("statistics");
  torch::manual_seed(3);
  std::vector<at::Tensor> tensors;
  for (const int64_t n : {1, 15, 16, 17, 33, 1000, 65537, (1 << 20) + 3}) {
    tensors.push_back(torch::randn({n}) * 3 + 0.25);
  }
  at::Tensor nan = torch::randn({100});
  nan[37] = std::nanf("");
  at::Tensor infinities = torch::randn({50});
  infinities[3] = INFINITY;
  infinities[40] = -INFINITY;
  at::Tensor tail_nan = torch::randn({35});
  tail_nan[34] = std::nanf("");
  tensors.insert(tensors.end(),
                 {nan, infinities, tail_nan, torch::full({20}, -INFINITY), -torch::rand({4097}) - 1,
                  torch::randn({64, 48}).t(), at::_neg_view(torch::randn({100}) + 1),
                  torch::randn({300}).to(at::kHalf), torch::randn({300}).to(at::kBFloat16)});
  auto seq = modhooks::Sequential(modhooks::nn::Identity());
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    debugger.start(seq);
    for (const at::Tensor& t : tensors) modhooks::call(seq, t);
    debugger.stop();
    debugger.step();
  }
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  auto expect_bits = [](const nlohmann::ordered_json& written, const at::Tensor& value,
                        const std::string& what) {
    const double v = value.to(at::kDouble).item<double>();
    if (!std::isfinite(v)) {
      EXPECT_TRUE(written.is_null()) << what << ": " << written;  // read_json's null
    } else {
      EXPECT_EQ(written.get<double>(), v) << what;
    }
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const auto& record = data["Module.0.Identity.forward." + std::to_string(i)]["input_args"][0];
    const std::string what = "tensor " + std::to_string(i) + " of " + std::to_string(t.numel());
    expect_bits(record["Max"], t.max(), what + ": Max");
    expect_bits(record["Min"], t.min(), what + ": Min");
    expect_bits(record["Mean"], t.mean(), what + ": Mean");
    expect_bits(record["Norm"], t.norm(), what + ": Norm");
  }
}

TEST(ProbeDebugger, HooksSitWhereMsprobesDoAndStopRemovesThem) {
  const std::string dir = fresh_dir("placement");
  MLP model;
  int user_calls = 0;
  // A user's forward hook that rescales fc2's output: msprobe dumps what forward returned.
  auto user = modhooks::register_forward_hook(
      model->fc2, [&](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        ++user_calls;
        return c10::IValue(out.toTensor() * 100);
      });
  const at::Tensor x = torch::randn({2, 4});
  const at::Tensor plain = model->fc2->forward(model->act->forward(model->fc1->forward(x)));
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    debugger.start(model);
    const at::Tensor y = modhooks::call(model, x);
    EXPECT_TRUE(y.allclose(plain * 100));
    debugger.stop();
    // After stop: the user's hook alone, and no entries.
    EXPECT_EQ(modhooks::detail::hooks_for(*model->fc2)->forward.size(), 1U);
    EXPECT_EQ(modhooks::detail::hooks_for(*model->fc2)->forward_pre.size(), 0U);
    EXPECT_EQ(modhooks::detail::hooks_for(*model->fc1)->forward.size(), 0U);
    modhooks::call(model, x).sum().backward();
    debugger.step();
  }
  EXPECT_EQ(user_calls, 2);
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  EXPECT_EQ(data.size(), 3U);  // three forward entries, no backward: stop came first
  EXPECT_FLOAT_EQ(data["Module.fc2.Linear.forward.0"]["output"][0]["Max"].get<float>(),
                  plain.max().item<float>());
}

TEST(ProbeDebugger, AStartAfterStopGoesOnCounting) {
  const std::string dir = fresh_dir("restart");
  MLP model;
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    for (int i = 0; i < 2; ++i) {
      debugger.start(model);
      modhooks::call(model, torch::randn({2, 4}));
      debugger.stop();
    }
    debugger.step();
  }
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  EXPECT_TRUE(data.contains("Module.fc1.Linear.forward.1"));
}

TEST(ProbeDebugger, EachRecordShowsTheTensorAsItIsThen) {
  // Two forwards in one step, libtorch's SGD between them (its step changes the weights without
  // counting a version), and a ReLU that changes its input in place: every record holds the
  // statistics of its tensor's values at that moment.
  const std::string dir = fresh_dir("record_time");
  torch::manual_seed(3);
  InPlace model;
  const at::Tensor x = torch::randn({5, 4});
  at::Tensor weight_after;
  {
    mp::PrecisionDebugger debugger(l0_config(dir));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
    debugger.start(model);
    modhooks::call(model, x).pow(2).mean().backward();
    opt.step();
    weight_after = model->fc1->weight.detach().clone();
    modhooks::call(model, x);
    debugger.stop();
    debugger.step();
  }
  const auto data = read_json(step_folder(dir, 0) + "/dump.json")["data"];
  const auto& weight = data["Module.fc1.Linear.forward.1"]["parameters"]["weight"];
  EXPECT_DOUBLE_EQ(weight["Mean"].get<double>(), weight_after.mean().item<double>());
  EXPECT_DOUBLE_EQ(weight["Max"].get<double>(), weight_after.max().item<double>());
  const auto& relu = data["Module.relu.ReLU.forward.0"];
  EXPECT_LT(relu["input_args"][0]["Min"].get<double>(), 0.0);
  EXPECT_GE(relu["output"][0]["Min"].get<double>(), 0.0);

  // A weight written through `.data()`, which counts no version of the parameter.
  const std::string again = fresh_dir("record_time_data");
  modhooks::nn::Linear fc(4, 3);
  modhooks::Sequential seq(fc);
  {
    mp::PrecisionDebugger debugger(l0_config(again));
    debugger.start(seq);
    modhooks::call(seq, x);
    fc->weight.data().add_(1.0);
    modhooks::call(seq, x);
    debugger.stop();
    debugger.step();
  }
  const auto written = read_json(step_folder(again, 0) + "/dump.json")["data"];
  EXPECT_DOUBLE_EQ(
      written["Module.0.Linear.forward.1"]["parameters"]["weight"]["Mean"].get<double>(),
      fc->weight.mean().item<double>());
}

TEST(ProbeDebugger, StepsAndListFilterAsMsprobes) {
  const std::string dir = fresh_dir("filters");
  MLP model;
  {
    mp::Config config = l0_config(dir);
    config.step = {1};
    config.list = {"fc2"};
    mp::PrecisionDebugger debugger(config);
    for (int step = 0; step < 2; ++step) {
      debugger.start(model);
      modhooks::call(model, torch::randn({2, 4}));
      debugger.stop();
      debugger.step();
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/step0"));
  const auto data = read_json(step_folder(dir, 1) + "/dump.json")["data"];
  ASSERT_EQ(data.size(), 1U);
  EXPECT_TRUE(data.contains("Module.fc2.Linear.forward.0"));
}

TEST(ProbeDebugger, AnUnwritableDumpPathFailsStart) {
  MLP model;
  mp::PrecisionDebugger debugger(l0_config("/proc/modhooks-probe"));
  try {
    debugger.start(model);
    FAIL() << "no error";
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.id(), "probe.dump.unwritable");
  }
}

TEST(ProbeDebugger, OneDebuggerAtATime) {
  mp::PrecisionDebugger first(l0_config(fresh_dir("one")));
  EXPECT_THROW(mp::PrecisionDebugger second(l0_config(fresh_dir("two"))), modhooks::RuntimeError);
}

TEST(ProbeDebugger, AConfigIsCheckedBeforeAnythingRuns) {
  mp::Config config;  // level L1
  EXPECT_THROW(mp::PrecisionDebugger debugger(config), modhooks::ValueError);
}
