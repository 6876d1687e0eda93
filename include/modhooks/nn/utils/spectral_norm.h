// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils {
namespace detail {
void spectral_norm(torch::nn::Module& module, const std::string& name,
                   std::int64_t n_power_iterations, double eps, std::optional<std::int64_t> dim);
void remove_spectral_norm(torch::nn::Module& module, const std::string& name);
}  // namespace detail

/// \addtogroup api_nn_utils
/// @{

/// Python's `torch.nn.utils.spectral_norm` (the hook form): the parameter `name` becomes
/// `name_orig`, beside the buffers `name_u` and `name_v` (Python's random start, drawn from
/// the default generator as Python draws it); before each forward through `modhooks::call`
/// (or a hook-aware holder, or `modhooks::Sequential`) a pre-hook sets `name` to
/// `name_orig / sigma`, with `n_power_iterations` steps of power iteration on `u` and `v` in
/// training mode and none in eval mode. `dim` defaults as in Python: 1 for the transposed
/// convolutions, 0 otherwise. State dicts carry Python's `spectral_norm` metadata (read as the
/// key `spectral_norm/weight.version` for `name` "weight"), and loading a state dict of version 0
/// or none (`name` and `name_orig` saved, no `name_v`) computes `name_v` as Python does.
///
/// Throws RuntimeError when applied twice to `name`, ValueError for `n_power_iterations` < 1,
/// KeyError when `name` is not a parameter.
///
/// **Example**:
/// \code
///   torch::nn::Linear fc(64, 1);
///   auto d = modhooks::nn::utils::spectral_norm(fc);   // weight_orig, weight_u, weight_v
/// \endcode
template <class M, modhooks::detail::IfNnModule<M> = 0>
detail::Returned<M> spectral_norm(M&& module, const std::string& name = "weight",
                                  std::int64_t n_power_iterations = 1, double eps = 1e-12,
                                  std::optional<std::int64_t> dim = std::nullopt) {
  detail::spectral_norm(modhooks::detail::module_ref(module), name, n_power_iterations, eps, dim);
  return std::forward<M>(module);
}

/// Python's `torch.nn.utils.remove_spectral_norm`: `name` is a parameter again, holding
/// `name_orig / sigma` without a power-iteration step; the buffers, the parameter `name_orig`
/// and the three hooks are gone. Throws ValueError "spectral_norm of 'weight' not found in ..."
/// where none was applied.
template <class M, modhooks::detail::IfNnModule<M> = 0>
detail::Returned<M> remove_spectral_norm(M&& module, const std::string& name = "weight") {
  detail::remove_spectral_norm(modhooks::detail::module_ref(module), name);
  return std::forward<M>(module);
}

/// @}

}  // namespace nn::utils
MODHOOKS_END_NAMESPACE
