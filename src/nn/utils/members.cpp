// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <torch/nn/functional/instancenorm.h>  // libtorch 1.13's instancenorm.h needs it first
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>

#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "attributes.h"
#include "modhooks/core/error.h"
#include "modhooks/nn/utils/member.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {
namespace {

namespace tn = torch::nn;

template <class Impl>
using Fields = std::vector<std::pair<std::string_view, at::Tensor Impl::*>>;

/// The member of `Impl` named `name` among `fields`, where `module` is an `Impl`.
template <class Impl>
at::Tensor* field(torch::nn::Module& module, const std::string& name, const Fields<Impl>& fields) {
  auto* impl = dynamic_cast<Impl*>(&module);
  if (impl == nullptr) return nullptr;
  for (const auto& [key, pointer] : fields) {
    if (key == name) return &(impl->*pointer);
  }
  return nullptr;
}

/// `field` for the first of `Impls` that `module` is; `fields_of(Impl*)` lists its members.
template <class... Impls, class FieldsOf>
at::Tensor* field_of_any(torch::nn::Module& module, const std::string& name, FieldsOf fields_of) {
  at::Tensor* found = nullptr;
  ((found = found != nullptr ? found
                             : field<Impls>(module, name, fields_of(static_cast<Impls*>(nullptr)))),
   ...);
  return found;
}

const auto weight_and_bias = [](auto* tag) {
  using Impl = std::remove_pointer_t<decltype(tag)>;
  return Fields<Impl>{{"weight", &Impl::weight}, {"bias", &Impl::bias}};
};

const auto batch_norm = [](auto* tag) {
  using Impl = std::remove_pointer_t<decltype(tag)>;
  return Fields<Impl>{{"weight", &Impl::weight},
                      {"bias", &Impl::bias},
                      {"running_mean", &Impl::running_mean},
                      {"running_var", &Impl::running_var},
                      {"num_batches_tracked", &Impl::num_batches_tracked}};
};

const auto rnn_cell = [](auto* tag) {
  using Impl = std::remove_pointer_t<decltype(tag)>;
  return Fields<Impl>{{"weight_ih", &Impl::weight_ih},
                      {"weight_hh", &Impl::weight_hh},
                      {"bias_ih", &Impl::bias_ih},
                      {"bias_hh", &Impl::bias_hh}};
};

const auto weight_only = [](auto* tag) {
  using Impl = std::remove_pointer_t<decltype(tag)>;
  return Fields<Impl>{{"weight", &Impl::weight}};
};

const auto attention = [](auto* tag) {
  using Impl = std::remove_pointer_t<decltype(tag)>;
  return Fields<Impl>{{"in_proj_weight", &Impl::in_proj_weight},
                      {"in_proj_bias", &Impl::in_proj_bias},
                      {"bias_k", &Impl::bias_k},
                      {"bias_v", &Impl::bias_v},
                      {"q_proj_weight", &Impl::q_proj_weight},
                      {"k_proj_weight", &Impl::k_proj_weight},
                      {"v_proj_weight", &Impl::v_proj_weight}};
};

/// An RNN's forward reads `flat_weights_` (Python's `_flat_weights`, which its `__setattr__`
/// keeps in step with the attributes), named by `flat_weights_names_`: protected, so reached
/// through a class derived from it. Null where `module` is not an `Impl`.
template <class Impl>
std::pair<std::vector<at::Tensor>*, const std::vector<std::string>*> flat_weights_of(
    torch::nn::Module& module) {
  using Base = tn::detail::RNNImplBase<Impl>;
  struct Access : Base {
    static std::vector<at::Tensor>& weights(Base& rnn) { return rnn.*(&Access::flat_weights_); }
    static const std::vector<std::string>& names(Base& rnn) {
      return rnn.*(&Access::flat_weights_names_);
    }
  };
  auto* rnn = dynamic_cast<Base*>(&module);
  if (rnn == nullptr) return {nullptr, nullptr};
  return {&Access::weights(*rnn), &Access::names(*rnn)};
}

/// `flat_weights_of` for whichever of libtorch's RNNs `module` is.
std::pair<std::vector<at::Tensor>*, const std::vector<std::string>*> rnn_flat_weights(
    torch::nn::Module& module) {
  auto found = flat_weights_of<tn::RNNImpl>(module);
  if (found.first == nullptr) found = flat_weights_of<tn::LSTMImpl>(module);
  if (found.first == nullptr) found = flat_weights_of<tn::GRUImpl>(module);
  return found;
}

/// The members libtorch's layers read in their forward.
Member layer_member(torch::nn::Module& module, const std::string& name) {
  at::Tensor* found =
      field_of_any<tn::LinearImpl, tn::BilinearImpl, tn::Conv1dImpl, tn::Conv2dImpl, tn::Conv3dImpl,
                   tn::ConvTranspose1dImpl, tn::ConvTranspose2dImpl, tn::ConvTranspose3dImpl,
                   tn::LayerNormImpl, tn::GroupNormImpl>(module, name, weight_and_bias);
  if (found == nullptr) {
    found = field_of_any<tn::BatchNorm1dImpl, tn::BatchNorm2dImpl, tn::BatchNorm3dImpl,
                         tn::InstanceNorm1dImpl, tn::InstanceNorm2dImpl, tn::InstanceNorm3dImpl>(
        module, name, batch_norm);
  }
  if (found == nullptr) {
    found =
        field_of_any<tn::RNNCellImpl, tn::LSTMCellImpl, tn::GRUCellImpl>(module, name, rnn_cell);
  }
  if (found == nullptr) {
    found = field_of_any<tn::EmbeddingImpl, tn::EmbeddingBagImpl, tn::PReLUImpl>(module, name,
                                                                                 weight_only);
  }
  if (found == nullptr) {
    found = field_of_any<tn::MultiheadAttentionImpl>(module, name, attention);
  }
  if (found != nullptr) return Member(found);
  const auto [weights, names] = rnn_flat_weights(module);
  if (weights == nullptr) return {};
  for (std::size_t i = 0; i < names->size(); ++i) {
    if ((*names)[i] == name) return Member(weights, i);
  }
  return {};
}

std::string class_name(const torch::nn::Module& module) {
  return modhooks::detail::python_class_name(module);
}

}  // namespace

at::Tensor& Member::get() const {
  if (tensor_ != nullptr) return *tensor_;
  if (list_ == nullptr || index_ >= list_->size()) {
    modhooks::detail::fail<RuntimeError>("nn.utils.member.gone",
                                         "the module's flat weights no longer hold the tensor a "
                                         "utility computes");
  }
  return (*list_)[index_];
}

std::vector<std::string> flat_weight_names(torch::nn::Module& module) {
  const auto [weights, names] = rnn_flat_weights(module);
  return names == nullptr ? std::vector<std::string>{} : *names;
}

Member find_member(torch::nn::Module& module, const std::string& name) {
  if (auto utilities = find_utilities(module)) {
    for (const auto& [key, member] : utilities->members) {
      if (key == name) return Member(member);
    }
  }
  return layer_member(module, name);
}

Member member_for(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor) {
  const Member member = find_member(module, name);
  if (!member) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.member.unknown",
        "modhooks: cannot tell which member of " + class_name(module) + " its forward reads as '" +
            name + "'; declare it before applying the utility: " +
            "modhooks::nn::utils::declare_member(module, \"" + name + "\", module->" + name + ")");
  }
  if (!member.get().is_same(tensor)) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.member.other_tensor",
        "the member of " + class_name(module) + " read as '" + name +
            "' holds another tensor than the one registered as '" + name + "'");
  }
  return member;
}

void declare_member(torch::nn::Module& module, const std::string& name, at::Tensor& member) {
  const at::Tensor* registered = parameters_of(module).find(name);
  if (registered == nullptr) registered = buffers_of(module).find(name);
  if (registered == nullptr) {
    modhooks::detail::fail<AttributeError>(
        "nn.utils.no_attribute",
        "'" + class_name(module) + "' object has no attribute '" + name + "'");
  }
  if (!member.is_same(*registered)) {
    modhooks::detail::fail<RuntimeError>(
        "nn.utils.member.other_tensor",
        "the member of " + class_name(module) + " declared as '" + name +
            "' holds another tensor than the one registered as '" + name + "'");
  }
  auto utilities = utilities_for(module);
  for (auto& [key, pointer] : utilities->members) {
    if (key == name) {
      pointer = &member;
      return;
    }
  }
  utilities->members.emplace_back(name, &member);
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
