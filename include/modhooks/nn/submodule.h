// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
std::shared_ptr<torch::nn::Module> submodule(torch::nn::Module& root, const std::string& name);
}  // namespace detail

/// \addtogroup api_nn
/// @{

/// Python's `Module.get_submodule`: the submodule at the dotted path `name` ("encoder.layers.3");
/// `""` is `root` itself. `root` must be owned by a shared_ptr, as holders are. Throws
/// `modhooks::Error` with Python's text ("Net has no attribute `blokc`", "`weight` is not an
/// nn.Module").
///
/// **Example**:
/// \code
///   torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::ReLU());
///   std::shared_ptr<torch::nn::Module> first = modhooks::submodule(net, "0");
/// \endcode
template <class M, detail::IfNnModule<M> = 0>
std::shared_ptr<torch::nn::Module> submodule(M&& root, const std::string& name) {
  return detail::submodule(detail::module_ref(root), name);
}

/// @}

MODHOOKS_END_NAMESPACE
