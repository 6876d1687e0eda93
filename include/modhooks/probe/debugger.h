// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/probe/config.h"
#include "modhooks/register.h"
#include "modhooks/registration/detail/module_ref.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {

namespace detail {
struct DebuggerState;

/// Whether `P` is a compiled program with hook points (`modhooks::aoti::Model`,
/// `modhooks::executorch::Program`): its `points()` names them, its `point(name)` is one, with
/// the point's `name()`, `type_name()` and `has_inputs()`. The probe names neither program type,
/// so it needs neither component.
template <class P, class = void>
struct IsProgram : std::false_type {};
template <class P>
struct IsProgram<
    P, std::void_t<decltype(std::string(*std::declval<const P&>().points().begin())),
                   decltype(std::string(std::declval<const P&>().point(std::string()).name())),
                   decltype(std::string(std::declval<const P&>().point(std::string()).type_name())),
                   decltype(bool(std::declval<const P&>().point(std::string()).has_inputs()))>>
    : std::true_type {};
template <class P>
using IfProgram = std::enable_if_t<IsProgram<std::decay_t<P>>::value, int>;

/// A point's two hooks as the debugger writes them, over any point type: `point` is the point's
/// address (which call is which), `args` its inputs, `output` its output.
using PointPreHook = std::function<void(const void* point, const std::vector<c10::IValue>& args)>;
using PointForwardHook = std::function<void(const void* point, const c10::IValue& output)>;

/// One point of a program, what `PrecisionDebugger::start` needs of it: its name, its Python
/// class, whether it has an input point, and how to register the debugger's two hooks on it
/// (the pre-hook after the point's own, the forward hook before them, as on modules).
struct PointSite {
  std::string name;
  std::string type_name;
  bool has_inputs = false;
  std::function<RemovableHandle(PointPreHook)> add_pre_hook;
  std::function<RemovableHandle(PointForwardHook)> add_forward_hook;
};
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

  /// Hooks every point of a compiled program exported with hook points, an AOTInductor package
  /// (`modhooks::aoti::Model`) or an ExecuTorch program (`modhooks::executorch::Program`),
  /// under the names msprobe gives the eager model's modules in Python: the point's module path
  /// and Python class (`Module.block.fc.Linear.forward.0`). Forward only: a program has no
  /// backward, so there are no `backward` or `parameters_grad` entries. A point shows its
  /// module's tensor inputs only where they were exported as a point (`inputs=` at export: else
  /// its record has no `input_args`), and never the module's own tensors (its record has no
  /// `parameters`); see docs/probe.md. A point named "" (the root's) is not dumped, as msprobe
  /// does not dump the root.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::aoti::Model net("net.pt2");  // or modhooks::executorch::Program net("net.pte")
  ///   debugger.start(net);
  ///   net.run({x});
  ///   debugger.stop();
  ///   debugger.step();
  /// \endcode
  template <class P, detail::IfProgram<P> = 0>
  void start(const P& program) {
    std::vector<detail::PointSite> sites;
    for (const std::string& name : program.points()) {
      const auto& point = program.point(name);
      using Point = std::decay_t<decltype(point)>;
      detail::PointSite site;
      site.name = point.name();
      site.type_name = point.type_name();
      site.has_inputs = point.has_inputs();
      site.add_pre_hook = [&point](detail::PointPreHook hook) {
        return modhooks::register_forward_pre_hook(
            point, [hook = std::move(hook)](const Point& p, const std::vector<c10::IValue>& args) {
              hook(&p, args);
            });
      };
      site.add_forward_hook = [&point](detail::PointForwardHook hook) {
        return modhooks::register_forward_hook(
            point,
            [hook = std::move(hook)](const Point& p, const std::vector<c10::IValue>& /*args*/,
                                     const c10::IValue& output) { hook(&p, output); },
            ForwardHookOptions().prepend(true));
      };
      sites.push_back(std::move(site));
    }
    start_points(sites);
  }

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
  void start_points(const std::vector<detail::PointSite>& sites);

  std::shared_ptr<detail::DebuggerState> state_;
};

}  // namespace probe
MODHOOKS_END_NAMESPACE
