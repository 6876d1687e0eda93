// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "attributes.h"

#include <torch/csrc/autograd/variable.h>

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

std::string shape_text(const at::Tensor& tensor) {
  std::ostringstream out;
  out << "torch.Size(" << tensor.sizes() << ")";
  return out.str();
}

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
      if (applied->name == name) return applied->attribute;
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

void Applied::rebind(const at::Tensor& attribute, const at::Tensor& value) {
  c10::TensorImpl* impl = attribute.unsafeGetTensorImpl();
  if (impl == value.unsafeGetTensorImpl()) return;
  // A leaf that requires grad is reached through a view of it, so that the attribute is an
  // interior tensor whose grad flows to the leaf (Python's attribute is the leaf itself).
  const at::Tensor shown = value.is_leaf() && value.requires_grad() ? value.view_as(value) : value;
  // Storage, sizes, strides and dtype; the version counter stays the attribute's own.
  impl->shallow_copy_from(shown.getIntrusivePtr());
  impl->set_autograd_meta(nullptr);
  if (shown.requires_grad())
    torch::autograd::impl::set_gradient_edge(attribute,
                                             torch::autograd::impl::gradient_edge(shown));
}

void make_leaf(const at::Tensor& attribute, const at::Tensor& value, bool requires_grad) {
  c10::TensorImpl* impl = attribute.unsafeGetTensorImpl();
  const at::Tensor data = value.detach();
  if (impl != data.unsafeGetTensorImpl()) impl->shallow_copy_from(data.getIntrusivePtr());
  impl->set_autograd_meta(nullptr);
  if (requires_grad) attribute.set_requires_grad(true);
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
        if (auto live = weak.lock()) live->recompute(self);
      });
}

void install(torch::nn::Module& module, Utilities& utilities,
             const std::shared_ptr<Applied>& applied) {
  applied->recompute(module);
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

at::Tensor same_parameter(const at::Tensor& parameter) {
  at::Tensor moved = parameter.variable_data();
  moved.set_requires_grad(parameter.requires_grad());
  if (parameter.grad().defined()) moved.mutable_grad() = parameter.grad();
  return moved;
}

at::Tensor new_parameter(const at::Tensor& tensor) {
  at::Tensor parameter = tensor.variable_data();
  parameter.set_requires_grad(true);
  return parameter;
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
