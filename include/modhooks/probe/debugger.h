// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include <memory>

#include "modhooks/detail/module_ref.h"
#include "modhooks/probe/config.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {

namespace detail {
struct DebuggerState;
}  // namespace detail

/// msprobe's `PrecisionDebugger` for libtorch modules: dumps every submodule's inputs, outputs,
/// parameters and gradients in msprobe's format, so that `msprobe compare` lines a C++ run up
/// with msprobe's Python run of the same model and names the module where they part
/// (docs/probe.md). One debugger at a time in a process, as msprobe's.
///
/// **Example**:
/// \code
///   modhooks::probe::Config config;
///   config.level = "L0";
///   config.dump_path = "dump";
///   modhooks::probe::PrecisionDebugger debugger(config);
///   debugger.start(net);
///   modhooks::call(net, x).sum().backward();
///   debugger.stop();
///   debugger.step();  // dump/step0/proc<pid>/dump.json is complete
/// \endcode
class PrecisionDebugger {
 public:
  /// Checks `config` (`Config::validate`) before anything runs.
  explicit PrecisionDebugger(const Config& config);
  ~PrecisionDebugger();
  PrecisionDebugger(const PrecisionDebugger&) = delete;
  PrecisionDebugger& operator=(const PrecisionDebugger&) = delete;
  PrecisionDebugger(PrecisionDebugger&&) = delete;
  PrecisionDebugger& operator=(PrecisionDebugger&&) = delete;

  /// Hooks every submodule of `model` (a `torch::nn` module, its holder or a shared_ptr to it;
  /// the root itself is not dumped, as in msprobe) where msprobe hooks them, and starts
  /// recording. The step's folder is created here: a dump path that cannot be written fails
  /// now. Only calls that fire hooks are seen: children run through `modhooks::call`,
  /// modhooks' holders or `modhooks::Sequential`.
  ///
  /// **Example**:
  /// \code
  ///   debugger.start(net);  // net: a holder, e.g. modhooks::Sequential
  /// \endcode
  template <class M, modhooks::detail::IfNnModule<M> = 0>
  void start(M&& model) {
    start_nn(modhooks::detail::module_ref(model));
  }

  /// Hooks every submodule of a TorchScript model (one Python scripted, loaded with
  /// `torch::jit::load`) under Python's names: module paths, and the scripted class's plain
  /// name (`Linear`, `Block`). Its submodules' calls are hooked where the model's code makes
  /// them; run the model with `modhooks::call(model, inputs)` or `model.forward`.
  ///
  /// **Example**:
  /// \code
  ///   torch::jit::Module model = torch::jit::load("scripted.pt");
  ///   debugger.start(model);
  ///   modhooks::call(model, {x}).toTensor().sum().backward();
  /// \endcode
  void start(const torch::jit::Module& model);

  /// Stops recording, removes every hook `start` added (the user's hooks stay as they were)
  /// and writes what the step has so far.
  ///
  /// **Example**:
  /// \code
  ///   debugger.stop();
  /// \endcode
  void stop();

  /// Ends the step: its dump.json, construct.json and stack.json (and, for task "tensor", its
  /// tensor files) are complete on disk when it returns; forward counters start again from 0.
  ///
  /// **Example**:
  /// \code
  ///   debugger.step();
  ///   optimizer.step();  // after: statistics were taken when the hooks ran anyway
  /// \endcode
  void step();

 private:
  void start_nn(torch::nn::Module& model);

  std::shared_ptr<detail::DebuggerState> state_;
};

}  // namespace probe
MODHOOKS_END_NAMESPACE
