// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/utils/parametrizations.h"

#include <ATen/ATen.h>

#include <vector>

#include "attributes.h"
#include "modhooks/state/state_hooks.h"
#include "spectral.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::parametrizations {
namespace {

using modhooks::detail::fail;

/// Python's `_WeightNorm`.
struct WeightNormImpl : torch::nn::Module {
  explicit WeightNormImpl(std::int64_t norm_dim)
      : torch::nn::Module("_WeightNorm"), dim(norm_dim) {}
  at::Tensor forward(const at::Tensor& weight_g, const at::Tensor& weight_v) {
    return at::_weight_norm(weight_v, weight_g, dim);
  }
  std::vector<at::Tensor> right_inverse(const at::Tensor& weight) {
    return {at::norm_except_dim(weight, 2, dim), weight};
  }
  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device) const override {
    return utils::detail::clone_leaf(*this, device);
  }
  std::int64_t dim;
};

/// Python's `_SpectralNorm`.
struct SpectralNormImpl : torch::nn::Module {
  SpectralNormImpl(const at::Tensor& weight, std::int64_t iterations, std::int64_t norm_dim,
                   double epsilon)
      : torch::nn::Module("_SpectralNorm"), eps(epsilon) {
    const std::int64_t ndim = weight.dim();
    if (norm_dim >= ndim || norm_dim < -ndim) {
      fail<IndexError>("nn.utils.spectral_norm.dim",
                       "Dimension out of range (expected to be in range of [-" +
                           std::to_string(ndim) + ", " + std::to_string(ndim - 1) + "] but got " +
                           std::to_string(norm_dim) + ")");
    }
    utils::detail::check_power_iterations(iterations);
    dim = norm_dim >= 0 ? norm_dim : norm_dim + ndim;
    if (ndim > 1) {
      n_power_iterations = iterations;
      at::NoGradGuard no_grad;
      const at::Tensor matrix = to_matrix(weight);
      const at::Tensor u = matrix.new_empty({matrix.size(0)}).normal_(0, 1);
      const at::Tensor v = matrix.new_empty({matrix.size(1)}).normal_(0, 1);
      register_buffer("_u", utils::detail::normalized(u, eps));
      register_buffer("_v", utils::detail::normalized(v, eps));
      power_method(matrix, 15);
    }
  }

  at::Tensor to_matrix(const at::Tensor& weight) const {
    const at::Tensor moved =
        dim != 0 ? weight.permute(utils::detail::dims_first(weight.dim(), dim)) : weight;
    return moved.flatten(1);
  }

  /// The buffer `_u` or `_v`, by name as Python reads it (a load with `assign` replaces it).
  at::Tensor& buffer(const char* key) { return utils::detail::buffers_of(*this)[key]; }

  void power_method(const at::Tensor& matrix, std::int64_t iterations) {
    at::NoGradGuard no_grad;
    at::Tensor& u = buffer("_u");
    at::Tensor& v = buffer("_v");
    for (std::int64_t i = 0; i < iterations; ++i) {
      utils::detail::normalize_into(at::mv(matrix, v), eps, u);
      utils::detail::normalize_into(at::mv(matrix.mH(), u), eps, v);
    }
  }

  at::Tensor forward(const at::Tensor& weight) {
    if (weight.dim() == 1) return utils::detail::normalized(weight, eps);
    const at::Tensor matrix = to_matrix(weight);
    if (is_training()) power_method(matrix, n_power_iterations);
    const at::Tensor u = buffer("_u").clone(at::MemoryFormat::Contiguous);
    const at::Tensor v = buffer("_v").clone(at::MemoryFormat::Contiguous);
    const at::Tensor sigma = at::vdot(u, at::mv(matrix, v));
    return weight / sigma;
  }

  at::Tensor right_inverse(const at::Tensor& value) { return value; }
  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device) const override {
    return utils::detail::clone_leaf(*this, device);
  }

  std::int64_t dim = 0;
  double eps;
  std::int64_t n_power_iterations = 1;
};

}  // namespace

namespace detail {

void weight_norm(torch::nn::Module& module, const std::string& name,
                 std::optional<std::int64_t> dim) {
  parametrize::detail::register_parametrization(
      module, name,
      parametrize::make_parametrization(std::make_shared<WeightNormImpl>(dim.value_or(-1))),
      /*unsafe=*/true);
  // Python's `_weight_norm_compat_hook`: a state dict of the hook form loads here.
  modhooks::register_load_state_dict_pre_hook(
      module, [name](torch::nn::Module&, StateDict& state_dict, const std::string& prefix,
                     const Metadata&, bool, std::vector<std::string>&, std::vector<std::string>&,
                     std::vector<std::string>&) {
        const std::string g_key = prefix + name + "_g";
        const std::string v_key = prefix + name + "_v";
        if (!state_dict.contains(g_key) || !state_dict.contains(v_key)) return;
        const at::Tensor original0 = state_dict.at(g_key);
        const at::Tensor original1 = state_dict.at(v_key);
        state_dict.erase(g_key);
        state_dict.erase(v_key);
        state_dict.insert_or_assign(prefix + "parametrizations." + name + ".original0", original0);
        state_dict.insert_or_assign(prefix + "parametrizations." + name + ".original1", original1);
      });
}

void spectral_norm(torch::nn::Module& module, const std::string& name,
                   std::int64_t n_power_iterations, double eps, std::optional<std::int64_t> dim) {
  const at::Tensor weight = utils::detail::find_tensor(module, name);
  if (!weight.defined()) {
    fail<ValueError>("nn.utils.spectral_norm.no_tensor",
                     "Module '" + utils::detail::module_repr(module) +
                         "' has no parameter or buffer with name '" + name + "'");
  }
  const std::int64_t norm_dim = dim.value_or(utils::detail::transposed_convolution(module) ? 1 : 0);
  parametrize::detail::register_parametrization(
      module, name,
      parametrize::make_parametrization(
          std::make_shared<SpectralNormImpl>(weight, n_power_iterations, norm_dim, eps)),
      /*unsafe=*/false);
}

}  // namespace detail
}  // namespace nn::utils::parametrizations
MODHOOKS_END_NAMESPACE
