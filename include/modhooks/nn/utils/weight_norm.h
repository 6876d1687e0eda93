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
void weight_norm(torch::nn::Module& module, const std::string& name,
                 std::optional<std::int64_t> dim);
void remove_weight_norm(torch::nn::Module& module, const std::string& name);
}  // namespace detail

/// \addtogroup api_nn_utils
/// @{

/// Python's `torch.nn.utils.weight_norm` (the hook form): the parameter `name` becomes
/// `name_g` (its norm over every dimension but `dim`; `std::nullopt`, Python's `None`, for the
/// norm of the whole tensor) and `name_v` (its direction), and a forward pre-hook recomputes
/// `name = name_g * name_v / ||name_v||` before each forward that runs through
/// `modhooks::call`, a hook-aware holder or `modhooks::Sequential`. The member `forward`
/// reads (`fc->weight`) holds the recomputed tensor. The module may be any spelling
/// `register_forward_pre_hook` takes; it is returned as given.
///
/// Throws RuntimeError "Cannot register two weight_norm hooks on the same parameter weight"
/// when applied twice, AttributeError when the module has no tensor `name`, KeyError when it is
/// not a parameter.
///
/// **Example**:
/// \code
///   torch::nn::Conv1d conv(torch::nn::Conv1dOptions(16, 16, 3));
///   modhooks::nn::utils::weight_norm(conv, "weight", /*dim=*/0);  // weight_g, weight_v
///   auto y = modhooks::call(conv, x);                              // weight recomputed
/// \endcode
template <class M, modhooks::detail::IfNnModule<M> = 0>
detail::Returned<M> weight_norm(M&& module, const std::string& name = "weight",
                                std::optional<std::int64_t> dim = 0) {
  detail::weight_norm(modhooks::detail::module_ref(module), name, dim);
  return std::forward<M>(module);
}

/// Python's `torch.nn.utils.remove_weight_norm`: `name` is a parameter again, holding the
/// recomputed weight; `name_g`, `name_v` and the hook are gone. Throws ValueError
/// "weight_norm of 'weight' not found in ..." where none was applied.
template <class M, modhooks::detail::IfNnModule<M> = 0>
detail::Returned<M> remove_weight_norm(M&& module, const std::string& name = "weight") {
  detail::remove_weight_norm(modhooks::detail::module_ref(module), name);
  return std::forward<M>(module);
}

/// @}

}  // namespace nn::utils
MODHOOKS_END_NAMESPACE
