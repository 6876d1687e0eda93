// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <vector>

#include "modhooks/core/handle.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

// Python's `torch.nn.utils` edit a module's attributes: a parameter leaves `_parameters`, new
// ones and buffers are registered, and a plain tensor attribute takes the old name, recomputed
// by a forward pre-hook. A libtorch module's `forward` reads a C++ member (`weight`) that shares
// its TensorImpl with the registered parameter; these functions keep that TensorImpl as the
// attribute and change what it holds, since nothing outside the class can reassign the member.

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {

using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

/// Python's print of a shape in error texts: `torch.Size([3, 4])`.
std::string shape_text(const at::Tensor& tensor);

/// The module's own tables, which libtorch keeps private and has no calls to remove from.
TensorDict& parameters_of(torch::nn::Module& module);
TensorDict& buffers_of(torch::nn::Module& module);

/// One utility on one tensor of a module: what Python keeps as a forward pre-hook object
/// (`WeightNorm`, `SpectralNorm`, a pruning method) or as the parametrized property.
struct Applied {
  explicit Applied(std::string tensor_name) : name(std::move(tensor_name)) {}
  Applied(const Applied&) = delete;
  Applied& operator=(const Applied&) = delete;
  virtual ~Applied() = default;

  /// Computes the tensor the module's forward reads (the pre-hook's work).
  virtual at::Tensor compute(torch::nn::Module& module) = 0;
  /// Makes the attribute hold `compute(module)`: what runs before each forward.
  void recompute(torch::nn::Module& module) { rebind(attribute, compute(module)); }
  /// Removes the hooks this utility registered.
  void remove_hooks() noexcept;

  /// The tensor's name (Python's `name`, `_tensor_name`).
  std::string name;
  /// The TensorImpl the module's member shares: Python's plain attribute `module.<name>`.
  at::Tensor attribute;
  /// The forward pre-hook and the state-dict hooks, removed with the utility.
  std::vector<RemovableHandle> handles;

  /// Makes the TensorImpl `attribute` shares hold `value`: its data, and its place in the
  /// autograd graph (the grad_fn of `value`), as Python's `setattr(module, name, value)` does.
  static void rebind(const at::Tensor& attribute, const at::Tensor& value);
};

/// The utilities applied to a module, in the order they were applied (Python's order of
/// `_forward_pre_hooks`); a utility replaced by another (a pruning container) keeps its place.
struct Utilities {
  std::vector<std::shared_ptr<Applied>> applied;
};

/// The module's utilities, created on first use (the module must be owned by a shared_ptr, as
/// for any hook), or null when it has none.
std::shared_ptr<Utilities> utilities_for(torch::nn::Module& module);
std::shared_ptr<Utilities> find_utilities(const torch::nn::Module& module);

/// The utility of type `T` applied to `name`, or null.
template <class T>
std::shared_ptr<T> find_applied(const torch::nn::Module& module, const std::string& name) {
  if (auto utilities = find_utilities(module)) {
    for (const auto& applied : utilities->applied) {
      if (applied->name != name) continue;
      if (auto found = std::dynamic_pointer_cast<T>(applied)) return found;
    }
  }
  return nullptr;
}

/// Registers `applied` on `module`, whose `utilities_for` the caller took before changing
/// anything (it throws for a module no shared_ptr owns): it joins the module's utilities, its
/// attribute is recomputed now, and a forward pre-hook recomputes it before each forward.
void install(torch::nn::Module& module, Utilities& utilities,
             const std::shared_ptr<Applied>& applied);

/// A forward pre-hook that recomputes `applied`'s attribute; it holds `applied` weakly (the
/// module's utilities own it), so a removed utility stops.
RemovableHandle recompute_before_forward(torch::nn::Module& module,
                                         const std::shared_ptr<Applied>& applied);

/// Takes `applied` off the module: its hooks and its place among the utilities.
void uninstall(torch::nn::Module& module, const std::shared_ptr<Applied>& applied);

/// Python's `del module._parameters[name]` (KeyError "'name'" where there is none); returns
/// the parameter.
at::Tensor take_parameter(torch::nn::Module& module, const std::string& name);
/// Python's `del module._buffers[name]`; returns the buffer.
at::Tensor take_buffer(torch::nn::Module& module, const std::string& name);
/// Python's `register_buffer(name, tensor)`: appended, or in place where the name is a buffer.
void put_buffer(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor);

/// The same parameter under another name (Python re-registers the Parameter object): a new
/// TensorImpl on the same storage, with its requires_grad and its grad. The old TensorImpl
/// stays the module's member, free to become the recomputed attribute.
at::Tensor same_parameter(const at::Tensor& parameter);
/// Python's `Parameter(tensor.data)`: a leaf on the same storage that requires grad.
at::Tensor new_parameter(const at::Tensor& tensor);
/// Makes the TensorImpl `attribute` shares a leaf again that holds `value`'s data, as when
/// Python registers a parameter under the attribute's name.
void make_leaf(const at::Tensor& attribute, const at::Tensor& value, bool requires_grad);

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
