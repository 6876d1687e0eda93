// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils {
namespace detail {
void declare_member(torch::nn::Module& module, const std::string& name, at::Tensor& member);
}  // namespace detail

/// \addtogroup api_nn_utils
/// @{

/// Says which member of your own module its `forward` reads as the tensor `name`, so that the
/// nn utilities can give that member each forward's newly computed tensor, as Python's
/// `setattr(module, name, value)` does. libtorch's layers need no declaration (`Linear`,
/// `Bilinear`, the convolutions, `Embedding`, `EmbeddingBag`, the batch, instance, layer and
/// group norms, `PReLU`, `MultiheadAttention`, the RNN cells, and `RNN`, `LSTM` and `GRU` through
/// their flat weights); a utility applied to a tensor of any other module without one throws
/// RuntimeError (`nn.utils.member.unknown`). `member` must hold the parameter or buffer
/// registered as `name` (RuntimeError `nn.utils.member.other_tensor` otherwise) and live as long
/// as the module: a data member of the module itself.
///
/// **Example**:
/// \code
///   struct NetImpl : torch::nn::Module {
///     at::Tensor w = register_parameter("w", at::randn({4, 4}));
///     at::Tensor forward(const at::Tensor& x) { return x.matmul(w); }
///   };
///   MODHOOKS_MODULE(Net);
///   Net net;
///   modhooks::nn::utils::declare_member(net, "w", net->w);
///   modhooks::nn::utils::weight_norm(net, "w");      // w_g, w_v; net->w recomputed
/// \endcode
template <class M, modhooks::detail::IfNnModule<M> = 0>
void declare_member(M&& module, const std::string& name, at::Tensor& member) {
  detail::declare_member(modhooks::detail::module_ref(module), name, member);
}

/// @}

}  // namespace nn::utils
MODHOOKS_END_NAMESPACE
