// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/utils/parametrize.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/moduledict.h>

#include <algorithm>

#include "attributes.h"
#include "modhooks/state/detail/texts.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::parametrize {
namespace {

using modhooks::detail::fail;
using modhooks::detail::python_dtype;
using modhooks::detail::torch_size;
using utils::detail::Applied;

/// Python's `_maybe_set(dest, src)` (without tensor swapping): `dest.set_(src)` under no_grad.
void set_data(const at::Tensor& dest, const at::Tensor& src) {
  at::NoGradGuard no_grad;
  dest.set_(src);
}

/// A parametrized tensor of a module: its attribute is `parametrizations.<name>()`.
struct Parametrized final : Applied {
  Parametrized(std::string tensor_name, utils::detail::Member where,
               const std::shared_ptr<ParametrizationListImpl>& parametrizations, bool parameter)
      : Applied(std::move(tensor_name), where), list_(parametrizations), was_parameter(parameter) {}
  at::Tensor compute(torch::nn::Module&) override { return list()->forward(); }
  /// Python's `parametrize.cached()` keeps a parametrized tensor in every mode.
  bool cacheable(torch::nn::Module&) const override { return true; }
  int reads_per_forward(torch::nn::Module& module) const override;
  /// The originals live in `parametrizations.<name>`, a child of the module.
  std::vector<std::pair<std::string, utils::detail::Attribute>> added() const override {
    return {};
  }
  utils::detail::Attribute was() const override {
    return was_parameter ? utils::detail::Attribute::kParameter : utils::detail::Attribute::kBuffer;
  }
  /// Each parametrization's copy, registered in turn.
  void apply_to(torch::nn::Module& copy) const override;

  /// Python's `module.parametrizations[name]`, which the module owns (so the originals die with
  /// it): RuntimeError where it was taken off the module.
  std::shared_ptr<ParametrizationListImpl> list() const {
    auto live = list_.lock();
    if (!live) {
      fail<RuntimeError>("nn.utils.parametrize.list_gone",
                         "modhooks: parametrizations." + name + " is no longer on the module");
    }
    return live;
  }

  std::weak_ptr<ParametrizationListImpl> list_;
  bool was_parameter;  // `name` was a parameter (not a buffer) before it was parametrized
};

/// Python's `RNNBase` reads its flat weights at each forward (`_update_flat_weights`), and each
/// read of a parametrized tensor computes it: `_weights_have_changed` reads the flat weights in
/// order, through `hasattr` and `getattr`, up to the first that is another tensor than last time
/// (a parametrized one always is, as is one a hook form set), then `_init_flat_weights` reads each
/// of them twice. So the first changed flat weight, where it is parametrized, is computed four
/// times, every other parametrized one twice.
int Parametrized::reads_per_forward(torch::nn::Module& module) const {
  if (!member.in_flat_weights()) return 1;
  const auto utilities = utils::detail::find_utilities(module);
  if (!utilities) return 1;
  for (const std::string& flat : utils::detail::flat_weight_names(module)) {
    const auto applied = std::find_if(utilities->applied.begin(), utilities->applied.end(),
                                      [&](const auto& each) { return each->name == flat; });
    if (applied == utilities->applied.end()) continue;  // the same tensor as last time
    return applied->get() == this ? 4 : 2;
  }
  return 2;
}

std::string class_name(const torch::nn::Module& module) {
  return modhooks::detail::python_class_name(module);
}

}  // namespace

ParametrizationListImpl::ParametrizationListImpl(Parametrization first, const at::Tensor& original,
                                                 bool original_is_parameter, bool is_unsafe)
    : torch::nn::Module("ParametrizationList"), unsafe(is_unsafe) {
  std::vector<at::Tensor> news{original};
  if (first.right_inverse) {
    at::NoGradGuard no_grad;
    news = first.right_inverse(original);
  }
  is_tensor_ = !first.right_inverse_is_sequence;
  ntensors_ = news.size();
  if (is_tensor_) {
    const at::Tensor& value = news.at(0);
    if (value.scalar_type() != original.scalar_type()) {
      fail<ValueError>("nn.utils.parametrize.dtype",
                       "When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                       "original.dtype: " +
                           python_dtype(original.scalar_type()) +
                           "\nright_inverse(original).dtype: " + python_dtype(value.scalar_type()));
    }
    if (value.device() != original.device()) {
      fail<ValueError>("nn.utils.parametrize.device",
                       "When `right_inverse` outputs one tensor, it may not change the device.\n"
                       "original.device: " +
                           original.device().str() +
                           "\nright_inverse(original).device: " + value.device().str());
    }
    // Python keeps the original Parameter object, set to the right inverse's value.
    if (first.right_inverse) set_data(original, value);
    if (original_is_parameter) {
      register_parameter("original", original, original.requires_grad());
    } else {
      register_buffer("original", original);
    }
  } else {
    for (std::size_t i = 0; i < news.size(); ++i) {
      at::Tensor item = news[i].detach();
      const std::string key = "original" + std::to_string(i);
      if (original_is_parameter) {
        register_parameter(key, item, original.requires_grad());
      } else {
        item.set_requires_grad(original.requires_grad());
        register_buffer(key, item);
      }
    }
  }
  append(std::move(first));
}

std::vector<at::Tensor> ParametrizationListImpl::originals() {
  // Looked up by name at each use, as Python does: a load with `assign` may replace them.
  auto lookup = [this](const std::string& key) {
    if (const at::Tensor* found = utils::detail::parameters_of(*this).find(key)) return *found;
    return utils::detail::buffers_of(*this)[key];
  };
  if (is_tensor_) return {lookup("original")};
  std::vector<at::Tensor> out;
  out.reserve(ntensors_);
  for (std::size_t i = 0; i < ntensors_; ++i) out.push_back(lookup("original" + std::to_string(i)));
  return out;
}

at::Tensor ParametrizationListImpl::forward() {
  at::Tensor x = items_.at(0).forward(originals());
  for (std::size_t i = 1; i < items_.size(); ++i) x = items_[i].forward({x});
  return x;
}

void ParametrizationListImpl::right_inverse(const at::Tensor& value) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> values{value};
  for (std::size_t i = items_.size(); i-- > 0;) {
    const Parametrization& item = items_[i];
    if (!item.right_inverse) {
      fail<RuntimeError>(
          "nn.utils.parametrize.no_right_inverse",
          "parametrization " + class_name(*item.module) + " does not implement right_inverse.");
    }
    if (values.size() != 1) {
      fail<ValueError>("nn.utils.parametrize.right_inverse",
                       "'right_inverse' of " + class_name(*items_[i + 1].module) +
                           " must return a tensor before another parametrization");
    }
    values = item.right_inverse(values[0]);
  }
  const std::vector<at::Tensor> targets = originals();
  if (values.size() != targets.size()) {
    fail<ValueError>("nn.utils.parametrize.right_inverse",
                     "'right_inverse' must return a sequence of tensors of length " +
                         std::to_string(targets.size()) + ". Got a sequence of length " +
                         std::to_string(values.size()) + ".");
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (values[i].scalar_type() != targets[i].scalar_type()) {
      const std::string which =
          is_tensor_ ? "The tensor returned by `right_inverse` has dtype "
                     : "Tensor " + std::to_string(i) + " returned by `right_inverse` has dtype ";
      fail<ValueError>("nn.utils.parametrize.dtype",
                       which + python_dtype(values[i].scalar_type()) + " while `original" +
                           (is_tensor_ ? "" : std::to_string(i)) + "` has dtype " +
                           python_dtype(targets[i].scalar_type()));
    }
  }
  for (std::size_t i = 0; i < targets.size(); ++i) set_data(targets[i], values[i]);
}

void ParametrizationListImpl::append(Parametrization parametrization) {
  register_module(std::to_string(items_.size()), parametrization.module);
  items_.push_back(std::move(parametrization));
}

Cached::Cached() { utils::detail::enter_cached_scope(); }

Cached::~Cached() { utils::detail::leave_cached_scope(); }

namespace {

/// Python's checks of a parametrization stacked on `module.<name>` (`y`), whose value is `x`.
void check_stacked(const std::string& name, const Parametrization& parametrization,
                   const at::Tensor& y, const at::Tensor& x) {
  if (x.scalar_type() != y.scalar_type()) {
    fail<ValueError>("nn.utils.parametrize.dtype",
                     "Registering a parametrization may not change the dtype of the tensor, "
                     "unless the `unsafe` flag is enabled.\nmodule." +
                         name + ".dtype: " + python_dtype(y.scalar_type()) +
                         "\nparametrization(module." + name +
                         ").dtype: " + python_dtype(x.scalar_type()));
  }
  if (!x.sizes().equals(y.sizes())) {
    fail<ValueError>("nn.utils.parametrize.shape",
                     "Registering a parametrization may not change the shape of the tensor, "
                     "unless the `unsafe` flag is enabled.\nmodule." +
                         name + ".shape: " + torch_size(y.sizes()) + "\nparametrization(module." +
                         name + ").shape: " + torch_size(x.sizes()));
  }
  if (parametrization.right_inverse) {
    const std::vector<at::Tensor> z = parametrization.right_inverse(x);
    if (parametrization.right_inverse_is_sequence || z.size() != 1) {
      fail<ValueError>("nn.utils.parametrize.right_inverse",
                       "parametrization.right_inverse must return a tensor. Got: tuple");
    }
    if (z[0].scalar_type() != y.scalar_type()) {
      fail<ValueError>("nn.utils.parametrize.dtype",
                       "The tensor returned by parametrization.right_inverse must have the "
                       "same dtype as module." +
                           name + ", unless the `unsafe` flag is enabled.\nmodule." + name +
                           ".dtype: " + python_dtype(y.scalar_type()) +
                           "\nreturned dtype: " + python_dtype(z[0].scalar_type()));
    }
    if (!z[0].sizes().equals(y.sizes())) {
      fail<ValueError>("nn.utils.parametrize.shape",
                       "The tensor returned by parametrization.right_inverse must have the "
                       "same shape as module." +
                           name + ", unless the `unsafe` flag is enabled.\nmodule." + name +
                           ".shape: " + torch_size(y.sizes()) +
                           "\nreturned shape: " + torch_size(z[0].sizes()));
    }
  }
}

}  // namespace

namespace detail {

void register_parametrization(torch::nn::Module& module, const std::string& name,
                              Parametrization parametrization, bool unsafe) {
  namespace ud = utils::detail;
  parametrization.module->train(module.is_training());
  auto utilities = ud::utilities_for(module);
  if (auto applied = ud::find_applied<Parametrized>(module, name)) {
    // The new value is computed before anything changes, unsafe or not: the member forward
    // reads must hold it (Python computes it at the next access instead).
    const at::Tensor y = applied->list()->forward();
    const at::Tensor x = parametrization.forward({y});
    if (!unsafe) check_stacked(name, parametrization, y, x);
    applied->list()->append(std::move(parametrization));
    applied->list()->unsafe = applied->list()->unsafe || unsafe;
    applied->assign(x);
    return;
  }
  const bool is_parameter = ud::parameters_of(module).contains(name);
  if (!is_parameter && !ud::buffers_of(module).contains(name)) {
    fail<ValueError>("nn.utils.parametrize.no_tensor",
                     "Module '" + ud::module_repr(module) +
                         "' does not have a parameter, a buffer, or a parametrized element with "
                         "name '" +
                         name + "'");
  }
  const at::Tensor original =
      is_parameter ? ud::parameters_of(module)[name] : ud::buffers_of(module)[name];
  const ud::Member member = ud::member_for(module, name, original);
  // Where the list goes: a name taken otherwise is refused before anything changes.
  ud::check_free(module, "parametrizations", ud::Attribute::kModule);
  torch::nn::ModuleDict dict{nullptr};
  for (const auto& child : module.named_children()) {
    if (child.key() == "parametrizations") {
      auto existing = std::dynamic_pointer_cast<torch::nn::ModuleDictImpl>(child.value());
      if (!existing) {
        fail<KeyError>("nn.utils.name_taken", "\"attribute 'parametrizations' already exists\"");
      }
      dict = torch::nn::ModuleDict(existing);
    }
  }
  // The list sets the original to the right inverse's value; a failure below sets it back.
  const at::Tensor before = original.variable_data();
  const bool inverts = static_cast<bool>(parametrization.right_inverse);
  std::shared_ptr<ParametrizationListImpl> list;
  at::Tensor first;  // what the member holds until the next forward
  try {
    list = std::make_shared<ParametrizationListImpl>(std::move(parametrization), original,
                                                     is_parameter, unsafe);
    first = list->forward();
    if (!unsafe) {
      if (first.scalar_type() != original.scalar_type()) {
        fail<ValueError>("nn.utils.parametrize.dtype",
                         "Registering a parametrization may not change the dtype of the tensor, "
                         "unless `unsafe` flag is enabled.\nunparametrized dtype: " +
                             python_dtype(original.scalar_type()) +
                             "\nparametrized dtype: " + python_dtype(first.scalar_type()));
      }
      if (!first.sizes().equals(original.sizes())) {
        fail<ValueError>("nn.utils.parametrize.shape",
                         "Registering a parametrization may not change the shape of the tensor, "
                         "unless `unsafe` flag is enabled.\nunparametrized shape: " +
                             torch_size(original.sizes()) +
                             "\nparametrized shape: " + torch_size(first.sizes()));
      }
    }
  } catch (...) {
    if (inverts) set_data(original, before);
    throw;
  }
  // Checked: from here on the module changes.
  auto applied = std::make_shared<Parametrized>(name, member, list, is_parameter);
  if (is_parameter) {
    ud::take_parameter(module, name);
  } else {
    ud::take_buffer(module, name);
  }
  if (dict.is_empty()) dict = module.register_module("parametrizations", torch::nn::ModuleDict());
  dict->update(
      std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{{name, list}});
  applied->assign(first);
  applied->handles.push_back(ud::recompute_before_forward(module, *utilities, applied));
  utilities->applied.push_back(applied);
}

bool is_parametrized(const torch::nn::Module& module, const std::optional<std::string>& name) {
  if (auto utilities = utils::detail::find_utilities(module)) {
    for (const auto& applied : utilities->applied) {
      if (std::dynamic_pointer_cast<Parametrized>(applied) && (!name || applied->name == *name))
        return true;
    }
  }
  return false;
}

std::shared_ptr<ParametrizationListImpl> parametrizations(const torch::nn::Module& module,
                                                          const std::string& name) {
  auto applied = utils::detail::find_applied<Parametrized>(module, name);
  return applied ? applied->list() : nullptr;
}

void remove_parametrizations(torch::nn::Module& module, const std::string& name,
                             bool leave_parametrized) {
  namespace ud = utils::detail;
  auto applied = ud::find_applied<Parametrized>(module, name);
  if (!applied) {
    fail<ValueError>(
        "nn.utils.parametrize.not_parametrized",
        "Module " + ud::module_repr(module) + " does not have a parametrization on " + name);
  }
  const std::shared_ptr<ParametrizationListImpl> owned = applied->list();
  ParametrizationListImpl& list = *owned;
  at::Tensor value;  // what `name` is again: the original tensor itself where it is one
  bool as_parameter = false;
  if (list.is_tensor()) {
    as_parameter = list.named_parameters(false).contains("original");
    value = as_parameter ? list.named_parameters(false)["original"]
                         : list.named_buffers(false)["original"];
    if (leave_parametrized) {
      at::NoGradGuard no_grad;
      set_data(value, list.forward());
    }
  } else if (leave_parametrized) {
    const at::Tensor t = list.forward();
    as_parameter = t.requires_grad();
    value = t.detach().requires_grad_(as_parameter);
  } else {
    fail<ValueError>("nn.utils.parametrize.sequence",
                     "Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
                     "parametrized in terms of a sequence of tensors.");
  }
  ud::uninstall(module, applied);
  for (const auto& child : module.named_children()) {
    if (child.key() != "parametrizations") continue;
    if (auto dict = std::dynamic_pointer_cast<torch::nn::ModuleDictImpl>(child.value())) {
      dict->pop(name);
      dict->unregister_module(name);
      if (dict->empty()) module.unregister_module("parametrizations");
    }
  }
  // Python's `_register_parameter_or_buffer`.
  if (as_parameter) {
    applied->member.get() = module.register_parameter(name, value, value.requires_grad());
  } else {
    applied->member.get() = module.register_buffer(name, value);
  }
}

}  // namespace detail

namespace {

void Parametrized::apply_to(torch::nn::Module& copy) const {
  const std::shared_ptr<ParametrizationListImpl> stack = list();
  for (std::size_t i = 0; i < stack->size(); ++i) {
    const Parametrization& parametrization = (*stack)[i];
    const auto refuse = [&](const std::string& why) {
      fail<TypeError>("nn.utils.clone.parametrization",
                      "modhooks: the parametrization " + class_name(*parametrization.module) +
                          " of '" + name + "' cannot be copied, so neither can its module: " + why);
    };
    if (!parametrization.copy) refuse("it was not made by make_parametrization");
    Parametrization copied;
    try {
      copied = parametrization.copy();
    } catch (const c10::Error& e) {
      refuse(e.what_without_backtrace());
    }
    detail::register_parametrization(copy, name, std::move(copied), stack->unsafe);
  }
}

}  // namespace
}  // namespace nn::utils::parametrize
MODHOOKS_END_NAMESPACE
