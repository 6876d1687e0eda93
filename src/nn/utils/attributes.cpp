// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "attributes.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <sstream>

#include "modhooks/core/error.h"
#include "modhooks/register.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
template <>
ModuleTable<nn::utils::detail::Utilities, NnOwner>&
nn_table<nn::utils::detail::Utilities>() noexcept {
  static ModuleTable<nn::utils::detail::Utilities, NnOwner> table;
  return table;
}
}  // namespace detail

namespace nn::utils::detail {
namespace {

// libtorch keeps a module's parameter and buffer tables private and can only add to them;
// Python's utilities delete from them. An explicit instantiation may name a private member
// ([temp.spec.general]/6), so this one hands out pointers to the two members, and nothing else
// reaches past libtorch's access control.
struct ParametersTag {
  using type = TensorDict torch::nn::Module::*;
  friend type member(ParametersTag);
};
struct BuffersTag {
  using type = TensorDict torch::nn::Module::*;
  friend type member(BuffersTag);
};
template <class Tag, typename Tag::type Member>
struct Expose {
  friend typename Tag::type member(Tag) { return Member; }
};
template struct Expose<ParametersTag, &torch::nn::Module::parameters_>;
template struct Expose<BuffersTag, &torch::nn::Module::buffers_>;

}  // namespace

TensorDict& parameters_of(torch::nn::Module& module) { return module.*member(ParametersTag{}); }
TensorDict& buffers_of(torch::nn::Module& module) { return module.*member(BuffersTag{}); }

std::string module_repr(const torch::nn::Module& module) {
  std::ostringstream out;
  out << module;
  return out.str();
}

at::Tensor find_tensor(torch::nn::Module& module, const std::string& name) {
  if (const at::Tensor* found = parameters_of(module).find(name)) return *found;
  if (const at::Tensor* found = buffers_of(module).find(name)) return *found;
  if (auto utilities = find_utilities(module)) {
    for (const auto& applied : utilities->applied) {
      if (applied->name == name) return applied->member.get();
    }
  }
  return {};
}

at::Tensor get_tensor(torch::nn::Module& module, const std::string& name) {
  at::Tensor found = find_tensor(module, name);
  if (!found.defined()) {
    modhooks::detail::fail<AttributeError>("nn.utils.no_attribute",
                                           "'" + modhooks::detail::python_class_name(module) +
                                               "' object has no attribute '" + name + "'");
  }
  return found;
}

void Applied::remove_hooks() noexcept {
  for (RemovableHandle& handle : handles) handle.remove();
  handles.clear();
}

namespace {

at::Tensor grad_of(const at::Tensor& tensor) {
  return tensor.is_leaf() ? tensor.grad() : at::Tensor();
}

Stamp stamp_of(const at::Tensor& tensor) {
  at::Tensor grad = grad_of(tensor);
  const std::int64_t grad_version = grad.defined() ? grad._version() : 0;
  return {tensor,         tensor.storage(), tensor._version(), tensor.storage_offset(),
          tensor.dtype(), std::move(grad),  grad_version};
}

bool same_as(const Stamp& stamp, const at::Tensor& tensor) {
  if (!stamp.tensor.is_same(tensor) || tensor._version() != stamp.version ||
      tensor.storage().unsafeGetStorageImpl() != stamp.storage.unsafeGetStorageImpl() ||
      tensor.storage_offset() != stamp.offset || tensor.dtype() != stamp.dtype) {
    return false;
  }
  const at::Tensor grad = grad_of(tensor);
  return grad.is_same(stamp.grad) && (!grad.defined() || grad._version() == stamp.grad_version);
}

}  // namespace

void Applied::hold(at::Tensor value) {
  member.get() = value;
  assigned_ = std::move(value);
  stamps_.clear();
}

void Applied::assign(const at::Tensor& value) {
  const std::lock_guard<std::mutex> lock(mutex_);
  hold(value);
}

bool Applied::unchanged(torch::nn::Module& module) {
  if (stamps_.empty() || !member.get().is_same(assigned_)) return false;
  const std::vector<at::Tensor> now = inputs(module);
  if (now.size() != stamps_.size()) return false;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (!same_as(stamps_[i], now[i])) return false;
  }
  return true;
}

void Applied::before_forward(torch::nn::Module& module) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!at::GradMode::is_enabled() && !steps(module) && unchanged(module)) return;
  hold(compute(module));
  // In training mode the next forward computes anyway: only eval mode keeps what it computed.
  if (steps(module)) return;
  for (const at::Tensor& input : inputs(module)) {
    // An inference tensor keeps no version: its value is never taken as unchanged.
    if (input.is_inference() || grad_of(input).is_inference()) {
      stamps_.clear();
      break;
    }
    stamps_.push_back(stamp_of(input));
  }
}

std::shared_ptr<Utilities> utilities_for(torch::nn::Module& module) {
  return modhooks::detail::entry_for(modhooks::detail::nn_table<Utilities>(), module);
}

std::shared_ptr<Utilities> find_utilities(const torch::nn::Module& module) {
  return modhooks::detail::entry_find(modhooks::detail::nn_table<Utilities>(), module);
}

RemovableHandle recompute_before_forward(torch::nn::Module& module,
                                         const std::shared_ptr<Applied>& applied) {
  std::weak_ptr<Applied> weak = applied;
  return modhooks::register_forward_pre_hook(
      module, [weak](torch::nn::Module& self, const std::vector<c10::IValue>&) {
        if (auto live = weak.lock()) live->before_forward(self);
      });
}

void install(torch::nn::Module& module, Utilities& utilities,
             const std::shared_ptr<Applied>& applied) {
  applied->assign(applied->compute(module));
  applied->handles.push_back(recompute_before_forward(module, applied));
  utilities.applied.push_back(applied);
}

void uninstall(torch::nn::Module& module, const std::shared_ptr<Applied>& applied) {
  applied->remove_hooks();
  if (auto utilities = find_utilities(module)) {
    auto& list = utilities->applied;
    list.erase(std::remove(list.begin(), list.end(), applied), list.end());
  }
}

void restore_parameter(torch::nn::Module& module, const std::shared_ptr<Applied>& applied,
                       std::initializer_list<std::string> added, const at::Tensor& value,
                       bool requires_grad) {
  uninstall(module, applied);
  for (const std::string& name : added) {
    TensorDict& parameters = parameters_of(module);
    if (parameters.contains(name)) {
      parameters.erase(name);
    } else {
      buffers_of(module).erase(name);
    }
  }
  applied->member.get() = module.register_parameter(applied->name, value, requires_grad);
}

at::Tensor take_parameter(torch::nn::Module& module, const std::string& name) {
  TensorDict& parameters = parameters_of(module);
  const at::Tensor* found = parameters.find(name);
  if (!found) modhooks::detail::fail<KeyError>("nn.utils.no_parameter", "'" + name + "'");
  at::Tensor parameter = *found;
  parameters.erase(name);
  return parameter;
}

at::Tensor take_buffer(torch::nn::Module& module, const std::string& name) {
  TensorDict& buffers = buffers_of(module);
  const at::Tensor* found = buffers.find(name);
  if (!found) modhooks::detail::fail<KeyError>("nn.utils.no_buffer", "'" + name + "'");
  at::Tensor buffer = *found;
  buffers.erase(name);
  return buffer;
}

void put_buffer(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor) {
  TensorDict& buffers = buffers_of(module);
  if (at::Tensor* found = buffers.find(name)) {
    *found = tensor;
  } else {
    module.register_buffer(name, tensor);
  }
}

at::Tensor new_parameter(const at::Tensor& tensor) {
  at::Tensor parameter = tensor.variable_data();
  parameter.set_requires_grad(true);
  return parameter;
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
