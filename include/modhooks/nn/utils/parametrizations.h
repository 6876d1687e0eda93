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
#include "modhooks/nn/utils/parametrize.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::parametrizations {
namespace detail {
void weight_norm(torch::nn::Module& module, const std::string& name,
                 std::optional<std::int64_t> dim);
void spectral_norm(torch::nn::Module& module, const std::string& name,
                   std::int64_t n_power_iterations, double eps, std::optional<std::int64_t> dim);
}  // namespace detail

/// \addtogroup api_nn_utils
/// @{

/// Python's `torch.nn.utils.parametrizations.weight_norm`: a parametrization (registered
/// `unsafe`, as Python's) whose originals are `parametrizations.weight.original0` (for `name`
/// "weight") (the norm, Python's `weight_g`) and `original1` (the direction, `weight_v`). A state
/// dict of the hook form (`name_g`, `name_v`) loads into it, as in Python.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> weight_norm(M&& module, const std::string& name = "weight",
                                       std::optional<std::int64_t> dim = 0) {
  detail::weight_norm(modhooks::detail::module_ref(module), name, dim);
  return std::forward<M>(module);
}

/// Python's `torch.nn.utils.parametrizations.spectral_norm`: a parametrization whose module
/// (Python's `_SpectralNorm`) holds the buffers `_u` and `_v` (15 power-iteration steps at
/// registration, `n_power_iterations` before each forward in training mode, none in eval
/// mode); the original is `parametrizations.weight.original`. Throws ValueError where the module
/// has no tensor `name`, IndexError for a `dim` out of range.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> spectral_norm(M&& module, const std::string& name = "weight",
                                         std::int64_t n_power_iterations = 1, double eps = 1e-12,
                                         std::optional<std::int64_t> dim = std::nullopt) {
  detail::spectral_norm(modhooks::detail::module_ref(module), name, n_power_iterations, eps, dim);
  return std::forward<M>(module);
}

/// @}

}  // namespace nn::utils::parametrizations
MODHOOKS_END_NAMESPACE
