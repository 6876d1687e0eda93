// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <atomic>
#include <functional>
#include <memory>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// libtorch's `clone` of a module, run as `copy`.
using CloneCopy = std::function<std::shared_ptr<torch::nn::Module>()>;
/// What the nn utilities do around a clone (null until a utility is applied): libtorch's
/// `clone` finds a module's tensors by the names its class registers, which a utility changed
/// (Python's `weight_g` and `weight_v` for `weight`); they lay the tensors out as the class
/// registers them while `copy` runs, put them back, and apply themselves to the copy.
extern std::atomic<std::shared_ptr<torch::nn::Module> (*)(const torch::nn::Module&,
                                                          const CloneCopy&)>
    clone_around_utilities;

/// Runs `copy` (libtorch's `clone` of `original`), with the nn utilities' part where any is
/// applied; returns the copy, as Python's `copy.deepcopy` makes it.
inline std::shared_ptr<torch::nn::Module> clone_module(const torch::nn::Module& original,
                                                       const CloneCopy& copy) {
  if (auto around = clone_around_utilities.load(std::memory_order_acquire)) {
    return around(original, copy);
  }
  return copy();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
