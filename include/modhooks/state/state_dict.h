// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "modhooks/state/ordered_map.h"

namespace modhooks {

/// One module's entry in Python's `state_dict._metadata`, e.g. {"version": 1}. Python allows any
/// value there, but every module of torch.nn writes only integers, and checkpoints carry them.
using Metadata = std::map<std::string, std::int64_t>;

/// Python's `state_dict()` result: an OrderedDict of name -> tensor with `_metadata` beside it.
///
/// Iteration is in insertion order and yields `std::pair<const std::string, torch::Tensor>&`, so
/// `for (auto& [key, tensor] : sd)` works. Copies share tensors, like Python's `dict.copy()`.
class StateDict : public OrderedMap<at::Tensor> {
 public:
  /// Python's `_metadata`: module prefix without the trailing dot ("" for the root, "0.1" for a
  /// grandchild) -> that module's metadata, in module traversal order.
  OrderedMap<Metadata>& metadata() { return metadata_; }
  const OrderedMap<Metadata>& metadata() const { return metadata_; }

 private:
  OrderedMap<Metadata> metadata_;
};

}  // namespace modhooks
