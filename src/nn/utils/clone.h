// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "modhooks/nn/detail/clone.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {

/// `copy` (libtorch's clone of `original`) with the tensors of every module under `original`
/// that has utilities laid out as its class registers them, then the same utilities applied to
/// the copy and `original`'s state dict loaded into it: Python's `copy.deepcopy`.
std::shared_ptr<torch::nn::Module> clone_around(const torch::nn::Module& original,
                                                const modhooks::detail::CloneCopy& copy);

/// Makes `modhooks::detail::clone_module` run `clone_around` from now on (the first utility
/// applied in the process does).
void clone_with_utilities() noexcept;

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
