// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/core/handle.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

// Python's `torch.nn.utils` edit a module's attributes: a parameter leaves `_parameters`, new
// ones and buffers are registered, and a plain tensor attribute takes the old name, set anew by
// a forward pre-hook (`setattr(module, name, value)`). A libtorch module's `forward` reads a C++
// member (`LinearImpl::weight`); these functions find that member and assign it, so that each
// forward reads a tensor of its own and the original parameter's TensorImpl goes where Python's
// Parameter object goes.

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {

using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

/// The module's own tables, which libtorch keeps private and has no calls to remove from.
TensorDict& parameters_of(torch::nn::Module& module);
TensorDict& buffers_of(torch::nn::Module& module);

/// Where a module's forward reads one of its tensors: a member of its class
/// (`LinearImpl::weight`), or an entry of an RNN's `flat_weights_`, a vector that `to()`
/// rebuilds, so the entry is found anew at each use.
class Member {
 public:
  Member() = default;
  explicit Member(at::Tensor* tensor) : tensor_(tensor) {}
  Member(std::vector<at::Tensor>* list, std::size_t index) : list_(list), index_(index) {}
  explicit operator bool() const noexcept { return tensor_ != nullptr || list_ != nullptr; }
  /// The member itself (Python's plain attribute `module.<name>`).
  at::Tensor& get() const;

 private:
  at::Tensor* tensor_ = nullptr;
  std::vector<at::Tensor>* list_ = nullptr;
  std::size_t index_ = 0;
};

/// The member `module`'s forward reads as `name`: one given to `declare_member`, else one of
/// libtorch's layers' members; empty where there is none.
Member find_member(torch::nn::Module& module, const std::string& name);

/// `find_member`, checked before a utility changes anything: RuntimeError where there is none
/// (saying how to declare it), or where it does not hold `tensor`, the tensor registered as
/// `name`.
Member member_for(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor);

/// One input of a utility's computation as it was when the value was computed. The same
/// TensorImpl with the same version, storage and dtype, and the same gradient (a backward pass
/// changes it, and libtorch's optimizers write through `.data()`, which no version counter
/// sees), stands for the same value.
struct Stamp {
  at::Tensor tensor;
  c10::Storage storage;  // held, so that a new storage cannot reuse the address
  std::int64_t version = 0;
  std::int64_t offset = 0;
  caffe2::TypeMeta dtype;
  at::Tensor grad;  // held, for the same reason
  std::int64_t grad_version = 0;
};

/// One utility on one tensor of a module: what Python keeps as a forward pre-hook object
/// (`WeightNorm`, `SpectralNorm`, a pruning method) or as the parametrized property.
struct Applied {
  Applied(std::string tensor_name, Member where) : name(std::move(tensor_name)), member(where) {}
  Applied(const Applied&) = delete;
  Applied& operator=(const Applied&) = delete;
  virtual ~Applied() = default;

  /// Computes the tensor the module's forward reads (the pre-hook's work).
  virtual at::Tensor compute(torch::nn::Module& module) = 0;
  /// The tensors `compute` reads. While none of them changed, a forward without grad in eval
  /// mode keeps the last value instead of computing it again, so that a served model writes
  /// nothing.
  virtual std::vector<at::Tensor> inputs(torch::nn::Module& module) = 0;
  /// Whether every forward computes, grad or not, as in Python: in training mode, where
  /// `compute` may step the module's state (spectral norm's power iteration).
  virtual bool steps(torch::nn::Module& module) const { return module.is_training(); }

  /// Python's `setattr(module, name, value)`: the member holds `value` from now on.
  void assign(const at::Tensor& value);
  /// What runs before each forward: the member gets a newly computed tensor, unless grad is off,
  /// the module is in eval mode (`steps` is false) and the inputs and the member are as the last
  /// computation left them. Serialised per utility: several threads may run the module without
  /// grad in eval mode, reading the member that none of them writes.
  void before_forward(torch::nn::Module& module);
  /// Removes the hooks this utility registered.
  void remove_hooks() noexcept;

  /// The tensor's name (Python's `name`, `_tensor_name`).
  std::string name;
  /// Where the module's forward reads the tensor.
  Member member;
  /// The forward pre-hook and the state-dict hooks, removed with the utility.
  std::vector<RemovableHandle> handles;

 private:
  /// The member and `assigned_` take `value`, whose inputs are not yet known (mutex_ held).
  void hold(at::Tensor value);
  bool unchanged(torch::nn::Module& module);

  std::mutex mutex_;
  std::vector<Stamp> stamps_;  // the inputs when `assigned_` was computed in eval mode, or none
  at::Tensor assigned_;        // what the member was last given
};

/// The utilities applied to a module, in the order they were applied (Python's order of
/// `_forward_pre_hooks`); a utility replaced by another (a pruning container) keeps its place.
/// Also the members its class's user declared.
struct Utilities {
  std::vector<std::shared_ptr<Applied>> applied;
  std::vector<std::pair<std::string, at::Tensor*>> members;
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
/// member is given `compute(module)` now, and a forward pre-hook sets it before each forward.
void install(torch::nn::Module& module, Utilities& utilities,
             const std::shared_ptr<Applied>& applied);

/// A forward pre-hook that runs `applied->before_forward`; it holds `applied` weakly (the
/// module's utilities own it), so a removed utility stops.
RemovableHandle recompute_before_forward(torch::nn::Module& module,
                                         const std::shared_ptr<Applied>& applied);

/// Takes `applied` off the module: its hooks and its place among the utilities.
void uninstall(torch::nn::Module& module, const std::shared_ptr<Applied>& applied);

/// The utility of type `T` on `name`, for Python's `remove_*`: ValueError `id`, with the text
/// `message()` makes, where there is none.
template <class T, class Message>
std::shared_ptr<T> applied_or_fail(const torch::nn::Module& module, const std::string& name,
                                   const char* id, Message&& message) {
  auto applied = find_applied<T>(module, name);
  if (!applied) modhooks::detail::fail<ValueError>(id, message());
  return applied;
}

/// The end of Python's `remove_*`: `applied` comes off `module`, the tensors it added (`added`,
/// parameters or buffers) are deleted, and its tensor is a parameter again, holding `value`, in
/// the member forward reads.
void restore_parameter(torch::nn::Module& module, const std::shared_ptr<Applied>& applied,
                       std::initializer_list<std::string> added, const at::Tensor& value,
                       bool requires_grad = true);

/// Python's `del module._parameters[name]` (KeyError "'name'" where there is none); returns
/// the parameter.
at::Tensor take_parameter(torch::nn::Module& module, const std::string& name);
/// Python's `del module._buffers[name]`; returns the buffer.
at::Tensor take_buffer(torch::nn::Module& module, const std::string& name);
/// Python's `register_buffer(name, tensor)`: appended, or in place where the name is a buffer.
void put_buffer(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor);

/// Python's `Parameter(tensor.data)`: a leaf on the same storage that requires grad.
at::Tensor new_parameter(const at::Tensor& tensor);

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
