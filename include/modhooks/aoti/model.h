// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "modhooks/aoti/point.h"
#include "modhooks/points/detail/program_handle.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
class AotiModel;
}  // namespace detail

namespace aoti {

/// \addtogroup api_aoti
/// @{

/// An AOTInductor package (`.pt2`) exported with hook points, run through libtorch's
/// `torch::inductor::AOTIModelPackageLoader`; hooks registered on its points fire inside the
/// compiled model on every `run`. The hook-point operators are registered by the library, so
/// loading needs no step of the user's. Each `Model` has its own points and hooks: two loaded
/// from one package are hooked separately.
///
/// **Example**:
/// \code
///   modhooks::aoti::Model net("net.pt2");
///   std::map<std::string, at::Tensor> acts;
///   auto h = modhooks::register_module_forward_hook(
///       [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&,
///           const c10::IValue& out) { acts[p.name()] = out.toTensor(); });  // kept: stays valid
///   std::vector<at::Tensor> y = net.run({x});
/// \endcode
class Model : public modhooks::detail::ProgramHandle<modhooks::detail::AotiModel, Point> {
 public:
  /// Loads the package's model `model_name`. `num_runners` compiled instances serve `run`
  /// calls from that many threads at once (more calls wait for one); `device_index` picks the
  /// GPU of a CUDA package (-1: the current one). Throws `FormatError` for a file that is not
  /// an AOTInductor package, `RuntimeError` for one exported for another modhooks ABI, and
  /// `ValueError` (`aoti.model.num_runners`) for `num_runners` 0.
  explicit Model(const std::string& package_path, std::size_t num_runners = 1,
                 const std::string& model_name = "model", int device_index = -1);

  /// Runs the compiled model on `inputs` (its flattened tensor inputs, as Python's
  /// `aoti_load_package(...)` passes them) and returns its flattened outputs. Hooks fire on the
  /// calling thread. A hook that throws ends the run with its exception; the model stays usable.
  /// A hook that runs this model again while each of its runners serves a run on this thread
  /// throws `RuntimeError` (`aoti.model.reentrant_run`) where libtorch's loader would wait for
  /// a runner forever.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs);

  /// The package's metadata (`aot_inductor.metadata` at compile time).
  std::unordered_map<std::string, std::string> metadata() const;
};

/// @}

}  // namespace aoti
MODHOOKS_END_NAMESPACE
