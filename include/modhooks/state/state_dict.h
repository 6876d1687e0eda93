// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "modhooks/state/ordered_map.h"
#include "modhooks/version.h"

namespace c10 {
struct IValue;
}  // namespace c10

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// One module's entry in Python's `state_dict._metadata`, e.g. {"version": 1}. Python allows any
/// value there, but every module of torch.nn writes only integers, and checkpoints carry them.
///
/// A dict nested in an entry (Python's `spectral_norm` writes `{'spectral_norm':
/// {'weight.version': 1}}`) is flattened: its keys join the outer key after
/// `kNestedMetadataSeparator` ("spectral_norm/weight.version"); saving nests them again.
using Metadata = std::map<std::string, std::int64_t>;

/// What joins a nested metadata key to the outer one (see `Metadata`).
inline constexpr char kNestedMetadataSeparator = '/';

/// Python's `state_dict()` result: an OrderedDict of name -> tensor with `_metadata` beside it.
///
/// Iteration is in insertion order and yields `std::pair<const std::string, torch::Tensor>&`, so
/// `for (auto& [key, tensor] : sd)` works. Copies share tensors, like Python's `dict.copy()`.
///
/// **Example**:
/// \code
///   modhooks::StateDict sd = modhooks::state_dict(net);
///   for (auto& [key, tensor] : sd) std::cout << key << " " << tensor.sizes() << "\n";
/// \endcode
class StateDict : public OrderedMap<at::Tensor> {
 public:
  /// The state dict a mapping of names to tensors stands for, as `load_object` returns it
  /// (`StateDict::from(ckpt.toGenericDict().at("model"))`): keys in the dict's order, tensors
  /// shared, no metadata. Throws modhooks::Error on anything else (not a dict, a key that is not
  /// a str, a value that is not a tensor), naming it.
  ///
  /// **Example**:
  /// \code
  ///   c10::IValue ckpt = modhooks::load_object("train.pt");
  ///   modhooks::StateDict sd = modhooks::StateDict::from(ckpt.toGenericDict().at("model"));
  /// \endcode
  static StateDict from(const c10::IValue& value);

  /// The other way: a `Dict<str, Tensor>` in this order, sharing the tensors, which
  /// `save_object` writes as a dict Python's `load_state_dict` takes. The metadata is left out
  /// (an IValue dict cannot carry Python's `_metadata` attribute).
  ///
  /// **Example**:
  /// \code
  ///   modhooks::save_object(modhooks::state_dict(net).to_ivalue(), "weights.pt");
  /// \endcode
  c10::IValue to_ivalue() const;

  /// Python's `_metadata`: module prefix without the trailing dot ("" for the root, "0.1" for a
  /// grandchild) -> that module's metadata, in module traversal order.
  ///
  /// **Example**:
  /// \code
  ///   std::int64_t version = sd.metadata().at("").at("version");  // the root module's
  /// \endcode
  OrderedMap<Metadata>& metadata() { return metadata_; }
  /// The same, const. \see \ref api_state
  const OrderedMap<Metadata>& metadata() const { return metadata_; }

 private:
  OrderedMap<Metadata> metadata_;
};

/// @}

MODHOOKS_END_NAMESPACE
