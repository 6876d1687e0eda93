// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "modhooks/executorch/point.h"
#include "modhooks/points/detail/program_handle.h"
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
class Program : public modhooks::detail::ProgramHandle<modhooks::detail::EtProgram, Point> {
 public:
  /// Loads the program at `path` and its method `forward`. Throws `FormatError`
  /// (`executorch.program.unloadable`) for a file ExecuTorch cannot load, and `RuntimeError`
  /// (`executorch.program.abi_mismatch`) for one exported for another modhooks ABI.
  explicit Program(const std::string& path);

  /// Runs `forward` on `inputs` (CPU tensors, the program's flattened inputs) and returns its
  /// outputs as new CPU tensors. Hooks fire on the calling thread. Runs from several threads
  /// take turns (an ExecuTorch method runs one call at a time). A hook that throws ends the run
  /// with its exception; the program stays usable. Throws `ValueError`
  /// (`executorch.program.bad_inputs`) for inputs of the wrong number, device or dtype,
  /// `RuntimeError` (`executorch.program.run_failed`) where ExecuTorch refuses the run, and
  /// `RuntimeError` (`executorch.program.reentrant_run`) where a hook runs this program again.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs);
};

/// @}

}  // namespace executorch
MODHOOKS_END_NAMESPACE
