// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/utils/spectral_norm.h"

#include <ATen/ATen.h>

#include <vector>

#include "attributes.h"
#include "modhooks/core/error.h"
#include "modhooks/state/state_hooks.h"
#include "spectral.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {
namespace {

/// Python's `SpectralNorm` hook object (version 1 of its state dicts).
struct SpectralNorm final : Applied {
  static constexpr std::int64_t kVersion = 1;

  SpectralNorm(std::string tensor_name, Member where, std::int64_t iterations,
               std::int64_t norm_dim, double epsilon)
      : Applied(std::move(tensor_name), where),
        orig_key(name + "_orig"),
        u_key(name + "_u"),
        v_key(name + "_v"),
        n_power_iterations(iterations),
        dim(norm_dim),
        eps(epsilon) {}

  std::vector<std::pair<std::string, Attribute>> added() const override {
    return {{orig_key, Attribute::kParameter},
            {u_key, Attribute::kBuffer},
            {v_key, Attribute::kBuffer}};
  }
  void apply_to(torch::nn::Module& copy) const override {
    spectral_norm(copy, name, n_power_iterations, eps, dim);
  }

  /// Python's `reshape_weight_to_matrix`.
  at::Tensor to_matrix(const at::Tensor& weight) const {
    // A matrix already (Linear's weight): the same values without a view in the graph.
    if (dim == 0 && weight.dim() == 2) return weight;
    at::Tensor matrix = weight;
    if (dim != 0) matrix = matrix.permute(dims_first(weight.dim(), dim));
    return matrix.reshape({matrix.size(0), -1});
  }

  at::Tensor compute(torch::nn::Module& module) override {
    return compute(module, module.is_training());
  }

  /// Python's `compute_weight(module, do_power_iteration)`.
  at::Tensor compute(torch::nn::Module& module, bool do_power_iteration) {
    const at::Tensor weight = parameters_of(module)[orig_key];
    TensorDict& buffers = buffers_of(module);
    at::Tensor u = buffers[u_key];
    at::Tensor v = buffers[v_key];
    const at::Tensor matrix = to_matrix(weight);
    if (do_power_iteration) {
      at::NoGradGuard no_grad;
      for (std::int64_t i = 0; i < n_power_iterations; ++i) {
        normalize_into(at::mv(matrix.t(), u), eps, v);
        normalize_into(at::mv(matrix, v), eps, u);
      }
      // The buffers change in place at the next step; autograd keeps these.
      u = u.clone(at::MemoryFormat::Contiguous);
      v = v.clone(at::MemoryFormat::Contiguous);
    }
    const at::Tensor sigma = at::dot(u, at::mv(matrix, v));
    return weight / sigma;
  }

  /// Python's `_solve_v_and_rescale`: the `v` of a version-0 state dict.
  static at::Tensor solve_v(const at::Tensor& matrix, const at::Tensor& u,
                            const at::Tensor& target_sigma) {
    at::Tensor v =
        at::linalg_multi_dot({matrix.t().mm(matrix).pinverse(), matrix.t(), u.unsqueeze(1)})
            .squeeze(1);
    return v.mul_(target_sigma / at::dot(u, at::mv(matrix, v)));
  }

  std::string orig_key, u_key, v_key;  // looked up at each forward, as Python's getattr does
  std::int64_t n_power_iterations;
  std::int64_t dim;
  double eps;
};

/// Python's `local_metadata['spectral_norm'][name + '.version']`, flattened (see `Metadata`).
std::string version_key(const std::string& name) {
  return std::string("spectral_norm") + kNestedMetadataSeparator + name + ".version";
}

/// Python's `SpectralNormStateDictHook`: the version beside the module's state.
void write_version(const SpectralNorm& fn, StateDict& state_dict, const std::string& prefix) {
  const std::string owner = prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);
  Metadata& metadata = state_dict.metadata().at(owner);
  const std::string key = version_key(fn.name);
  if (metadata.count(key)) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.spectral_norm.metadata",
        "Unexpected key in metadata['spectral_norm']: " + fn.name + ".version");
  }
  metadata[key] = SpectralNorm::kVersion;
}

/// Python's `SpectralNormLoadStateDictPreHook`: a state dict of version 0 or none, which holds
/// `name` and `name_orig` but no `name_v`, gets the `name_v` Python computes for it.
void upgrade(const SpectralNorm& fn, StateDict& state_dict, const std::string& prefix,
             const Metadata& metadata, bool strict, std::vector<std::string>& missing_keys) {
  const auto found = metadata.find(version_key(fn.name));
  const bool has_version = found != metadata.end();
  if (has_version && found->second >= 1) return;
  const std::string weight_key = prefix + fn.name;
  if (!has_version && state_dict.contains(weight_key + "_orig") &&
      state_dict.contains(weight_key + "_u") && state_dict.contains(weight_key + "_v") &&
      !state_dict.contains(weight_key)) {
    return;
  }
  bool has_missing_keys = false;
  for (const char* suffix : {"_orig", "", "_u"}) {
    const std::string key = weight_key + suffix;
    if (!state_dict.contains(key)) {
      has_missing_keys = true;
      if (strict) missing_keys.push_back(key);
    }
  }
  if (has_missing_keys) return;
  at::NoGradGuard no_grad;
  const at::Tensor weight_orig = state_dict.at(weight_key + "_orig");
  const at::Tensor weight = state_dict.at(weight_key);
  state_dict.erase(weight_key);
  const at::Tensor sigma = (weight_orig / weight).mean();
  const at::Tensor u = state_dict.at(weight_key + "_u");
  state_dict.insert_or_assign(weight_key + "_v",
                              SpectralNorm::solve_v(fn.to_matrix(weight_orig), u, sigma));
}

}  // namespace

void spectral_norm(torch::nn::Module& module, const std::string& name,
                   std::int64_t n_power_iterations, double eps, std::optional<std::int64_t> dim) {
  if (find_applied<SpectralNorm>(module, name)) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.spectral_norm.twice",
        "Cannot register two spectral_norm hooks on the same parameter " + name);
  }
  check_power_iterations(n_power_iterations);
  auto utilities = utilities_for(module);
  const at::Tensor* found = parameters_of(module).find(name);
  if (!found) modhooks::detail::fail<KeyError>("nn.utils.no_parameter", "'" + name + "'");
  const at::Tensor weight = *found;
  auto fn =
      std::make_shared<SpectralNorm>(name, member_for(module, name, weight), n_power_iterations,
                                     dim.value_or(transposed_convolution(module) ? 1 : 0), eps);
  at::Tensor u, v;
  {
    at::NoGradGuard no_grad;
    const at::Tensor matrix = fn->to_matrix(weight);
    u = normalized(weight.new_empty({matrix.size(0)}).normal_(0, 1), eps);
    v = normalized(weight.new_empty({matrix.size(1)}).normal_(0, 1), eps);
  }
  check_free(module, name + "_orig", Attribute::kParameter);
  check_free(module, name + "_u", Attribute::kBuffer);
  check_free(module, name + "_v", Attribute::kBuffer);
  // Python registers the Parameter object itself as `weight_orig`.
  take_parameter(module, name);
  put_parameter(module, name + "_orig", weight, weight.requires_grad());
  put_buffer(module, name + "_u", u);
  put_buffer(module, name + "_v", v);
  // Python sets `name` to `weight.data` here; the first forward computes it.
  fn->assign(weight.variable_data());
  utilities->applied.push_back(fn);
  fn->handles.push_back(recompute_before_forward(module, *utilities, fn));
  const std::weak_ptr<SpectralNorm> weak = fn;
  fn->handles.push_back(modhooks::register_state_dict_post_hook(
      module, [weak](torch::nn::Module&, StateDict& state_dict, const std::string& prefix,
                     const Metadata&) {
        if (auto live = weak.lock()) write_version(*live, state_dict, prefix);
      }));
  fn->handles.push_back(modhooks::register_load_state_dict_pre_hook(
      module, [weak](torch::nn::Module&, StateDict& state_dict, const std::string& prefix,
                     const Metadata& metadata, bool strict, std::vector<std::string>& missing,
                     std::vector<std::string>&, std::vector<std::string>&) {
        if (auto live = weak.lock()) upgrade(*live, state_dict, prefix, metadata, strict, missing);
      }));
}

void remove_spectral_norm(torch::nn::Module& module, const std::string& name) {
  auto fn = applied_or_fail<SpectralNorm>(module, name, "nn.utils.spectral_norm.not_found", [&] {
    return "spectral_norm of '" + name + "' not found in " + module_repr(module);
  });
  at::Tensor weight;
  {
    at::NoGradGuard no_grad;
    weight = fn->compute(module, /*do_power_iteration=*/false);
  }
  restore_parameter(module, fn, {name + "_u", name + "_v", name + "_orig"}, new_parameter(weight));
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
