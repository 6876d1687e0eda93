// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/modules/conv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/version.h"

// What both forms of spectral normalisation compute with (Python's `F.normalize` and the
// matrix view of a weight), in the same operators as Python, so that u, v and sigma agree.

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {

/// Python's `F.normalize(x, dim=0, eps=eps)`.
inline at::Tensor normalized(const at::Tensor& x, double eps) {
  return x / at::linalg_vector_norm(x, 2, {0}, /*keepdim=*/true).clamp_min(eps).expand_as(x);
}

/// Python's `F.normalize(x, dim=0, eps=eps, out=out)`.
inline void normalize_into(const at::Tensor& x, double eps, at::Tensor& out) {
  at::div_out(out, x,
              at::linalg_vector_norm(x, 2, {0}, /*keepdim=*/true).clamp_min_(eps).expand_as(x));
}

/// The permutation that moves `dim` first and keeps the others in order.
inline std::vector<std::int64_t> dims_first(std::int64_t ndim, std::int64_t dim) {
  std::vector<std::int64_t> order{dim};
  for (std::int64_t d = 0; d < ndim; ++d) {
    if (d != dim) order.push_back(d);
  }
  return order;
}

/// Whether `dim` defaults to 1 (Python's test for ConvTranspose1d/2d/3d).
inline bool transposed_convolution(torch::nn::Module& module) {
  return dynamic_cast<torch::nn::ConvTranspose1dImpl*>(&module) ||
         dynamic_cast<torch::nn::ConvTranspose2dImpl*>(&module) ||
         dynamic_cast<torch::nn::ConvTranspose3dImpl*>(&module);
}

/// Python's check of `n_power_iterations`, in both forms.
inline void check_power_iterations(std::int64_t n_power_iterations) {
  if (n_power_iterations <= 0) {
    modhooks::detail::fail<ValueError>(
        "nn.utils.spectral_norm.iterations",
        "Expected n_power_iterations to be positive, but got n_power_iterations=" +
            std::to_string(n_power_iterations));
  }
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
