// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "modhooks/executorch/point.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
class EtProgram;
}  // namespace detail

namespace executorch {

/// \addtogroup api_executorch
/// @{

/// An ExecuTorch program (`.pte`) written by `modhooks.export.to_executorch`, run by
/// ExecuTorch's C++ runtime in this process; hooks registered on its points fire inside the
/// program on every `run`. The hook-point kernel is registered by the library, so loading needs
/// no step of the user's. Each `Program` has its own points and hooks.
///
/// **Example**:
/// \code
///   modhooks::executorch::Program net("net.pte");
///   std::map<std::string, at::Tensor> acts;
///   auto h = modhooks::register_module_forward_hook(
///       [&](const modhooks::executorch::Point& p, const std::vector<c10::IValue>&,
///           const c10::IValue& out) { acts[p.name()] = out.toTensor(); });  // kept: stays valid
///   std::vector<at::Tensor> y = net.run({x});
/// \endcode
class Program {
 public:
  /// Loads the program at `path` and its method `forward`. Throws `FormatError`
  /// (`executorch.program.unloadable`) for a file ExecuTorch cannot load, and `RuntimeError`
  /// (`executorch.program.abi_mismatch`) for one exported for another modhooks ABI.
  explicit Program(const std::string& path);
  ~Program();
  /// Takes `other`'s program, points and hooks; `other` is left without a program, and every
  /// call on it but assignment and destruction throws `RuntimeError`
  /// (`executorch.program.moved_from`).
  Program(Program&& other) noexcept;
  /// Takes `other`'s program, points and hooks; this program's own go.
  Program& operator=(Program&& other) noexcept;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  /// The exported module paths, in the order the program first reaches them; empty for a
  /// program exported without points.
  const std::vector<std::string>& points() const;
  /// The point of module `name`; `KeyError` (`executorch.program.no_point`) naming the program
  /// and its points where it has none.
  const Point& point(const std::string& name) const;

  /// Runs `forward` on `inputs` (CPU tensors, the program's flattened inputs) and returns its
  /// outputs as new CPU tensors. Hooks fire on the calling thread. Runs from several threads
  /// take turns (an ExecuTorch method runs one call at a time). A hook that throws ends the run
  /// with its exception; the program stays usable. Throws `ValueError`
  /// (`executorch.program.bad_inputs`) for inputs of the wrong number, device or dtype,
  /// `RuntimeError` (`executorch.program.run_failed`) where ExecuTorch refuses the run, and
  /// `RuntimeError` (`executorch.program.reentrant_run`) where a hook runs this program again.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs);

  /// The program's path, as given.
  const std::string& path() const;

 private:
  modhooks::detail::EtProgram& live() const;

  std::unique_ptr<modhooks::detail::EtProgram> impl_;
};

/// @}

}  // namespace executorch
MODHOOKS_END_NAMESPACE
