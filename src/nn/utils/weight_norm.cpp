// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/utils/weight_norm.h"

#include <ATen/ATen.h>

#include <vector>

#include "attributes.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {
namespace {

/// Python's `WeightNorm` hook object.
struct WeightNorm final : Applied {
  WeightNorm(std::string tensor_name, Member where, std::int64_t norm_dim)
      : Applied(std::move(tensor_name), where),
        g_key(name + "_g"),
        v_key(name + "_v"),
        dim(norm_dim) {}
  at::Tensor compute(torch::nn::Module& module) override {
    TensorDict& parameters = parameters_of(module);
    return at::_weight_norm(parameters[v_key], parameters[g_key], dim);
  }
  std::vector<std::pair<std::string, Attribute>> added() const override {
    return {{g_key, Attribute::kParameter}, {v_key, Attribute::kParameter}};
  }
  void apply_to(torch::nn::Module& copy) const override { weight_norm(copy, name, dim); }
  std::string g_key, v_key;  // looked up at each forward, as Python's getattr does
  std::int64_t dim;
};

}  // namespace

void weight_norm(torch::nn::Module& module, const std::string& name,
                 std::optional<std::int64_t> dim) {
  if (find_applied<WeightNorm>(module, name)) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.weight_norm.twice",
        "Cannot register two weight_norm hooks on the same parameter " + name);
  }
  auto utilities = utilities_for(module);
  const at::Tensor weight = get_tensor(module, name);
  if (!parameters_of(module).contains(name))
    modhooks::detail::fail<KeyError>("nn.utils.no_parameter", "'" + name + "'");
  auto applied =
      std::make_shared<WeightNorm>(name, member_for(module, name, weight), dim.value_or(-1));
  const at::Tensor g = new_parameter(at::norm_except_dim(weight, 2, applied->dim));
  check_free(module, name + "_g", Attribute::kParameter);
  check_free(module, name + "_v", Attribute::kParameter);
  take_parameter(module, name);
  put_parameter(module, name + "_g", g);
  put_parameter(module, name + "_v", new_parameter(weight));
  install(module, *utilities, applied);
}

void remove_weight_norm(torch::nn::Module& module, const std::string& name) {
  auto applied = applied_or_fail<WeightNorm>(module, name, "nn.utils.weight_norm.not_found", [&] {
    return "weight_norm of '" + name + "' not found in " + module_repr(module);
  });
  const at::Tensor weight = applied->compute(module);
  restore_parameter(module, applied, {name + "_g", name + "_v"}, new_parameter(weight));
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
