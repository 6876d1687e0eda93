// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Event.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <shared_mutex>
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

/// `find_member`, checked before a utility changes anything: RuntimeError where there is none
/// (saying how to declare it), or where it does not hold `tensor`, the tensor registered as
/// `name`.
Member member_for(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor);

/// What a utility registers under a name.
enum class Attribute { kParameter, kBuffer, kModule };

/// One utility on one tensor of a module: what Python keeps as a forward pre-hook object
/// (`WeightNorm`, `SpectralNorm`, a pruning method) or as the parametrized property.
struct Applied {
  Applied(std::string tensor_name, Member where) : name(std::move(tensor_name)), member(where) {}
  Applied(const Applied&) = delete;
  Applied& operator=(const Applied&) = delete;
  virtual ~Applied() = default;

  /// Computes the tensor the module's forward reads (the pre-hook's work).
  virtual at::Tensor compute(torch::nn::Module& module) = 0;
  /// Whether a `parametrize::Cached` scope keeps the value this forward would compute: always
  /// for a parametrization (Python's `parametrize.cached()`); for the hook forms only in a
  /// forward without grad in eval mode (serving), where no power iteration steps and no graph
  /// is shared between forwards.
  virtual bool cacheable(torch::nn::Module& module) const;
  /// How many times Python computes the tensor in a forward outside `parametrize.cached()`:
  /// once for the hook forms, which compute in their forward pre-hook.
  virtual int reads_per_forward(torch::nn::Module& /*module*/) const { return 1; }

  /// The tensors the utility registered beside `name` (weight norm's `weight_g` and
  /// `weight_v`), with what each is; a parametrization's live in `parametrizations`.
  virtual std::vector<std::pair<std::string, Attribute>> added() const = 0;
  /// What `name` is in the module's class: a parameter, or a buffer a parametrization took.
  virtual Attribute was() const { return Attribute::kParameter; }
  /// Applies this utility with its options to `copy`, a clone of the module whose tensors are
  /// laid out as its class registers them (see `clone_around`); the caller loads the module's
  /// state dict into the copy after.
  virtual void apply_to(torch::nn::Module& copy) const = 0;

  /// Python's `setattr(module, name, value)`: the member holds `value` from now on.
  void assign(const at::Tensor& value);
  /// What runs before each forward: the member gets a newly computed tensor, as in Python
  /// (computed `reads_per_forward` times, the last one kept), or,
  /// inside a `Cached` scope, the value computed once in that scope. The module's forwards are
  /// serialised around it (see `Utilities`), so no forward reads the member while it is written.
  void before_forward(torch::nn::Module& module);
  /// Whether the member holds the value of the `Cached` scope `scope` (see `cached_scope`).
  bool computed_in(std::uint64_t scope) const noexcept {
    return scope_.load(std::memory_order_acquire) == scope;
  }
  /// A forward that reads the value of its `Cached` scope, which another thread may have
  /// computed on another stream of the device: this thread's stream waits for that computation,
  /// and the caching allocator keeps the value's memory until this stream is done with it.
  void read_on_this_stream() const;
  /// Removes the hooks this utility registered.
  void remove_hooks() noexcept;

  /// The tensor's name (Python's `name`, `_tensor_name`).
  std::string name;
  /// Where the module's forward reads the tensor.
  Member member;
  /// The forward pre-hook and the state-dict hooks, removed with the utility.
  std::vector<RemovableHandle> handles;

 private:
  std::atomic<std::uint64_t> scope_{0};  // the `Cached` scope the member's value is of; 0: none
  std::optional<c10::Event> computed_;   // recorded where a scope's value is on a device
};

/// The `parametrize::Cached` scope under way in the process (Python's cache is global): a
/// number of its own for each outermost scope, 0 while none lives.
std::uint64_t cached_scope() noexcept;
/// A `Cached` scope begins and ends (nested ones count).
void enter_cached_scope() noexcept;
void leave_cached_scope() noexcept;

/// The utilities applied to a module, in the order they were applied (Python's order of
/// `_forward_pre_hooks`); a utility replaced by another (a pruning container) keeps its place.
/// Also the members its class's user declared.
///
/// A forward writes the members its utilities compute, which another thread's forward of the
/// same module may be reading: `forwards` keeps them apart. A forward pre-hook registered before
/// the first utility's takes it, an always-call forward hook lets it go: exclusively where some
/// utility computes, shared inside a `Cached` scope once every value is the scope's, so threads
/// serving one model in a scope run in parallel.
struct Utilities {
  std::vector<std::shared_ptr<Applied>> applied;
  std::vector<std::pair<std::string, at::Tensor*>> members;
  std::shared_mutex forwards;
  std::vector<RemovableHandle> guards;  // the two hooks around each forward, while any utility
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
/// module's utilities own it), so a removed utility stops. The module's first utility also
/// registers, before it, the hooks that serialise its forwards (see `Utilities`).
RemovableHandle recompute_before_forward(torch::nn::Module& module, Utilities& utilities,
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
/// Python's `register_parameter(name, tensor)`: appended, or in place where the name is a
/// parameter.
void put_parameter(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor,
                   bool requires_grad = true);

/// Python's KeyError "attribute 'name' already exists" where `name` is another kind of attribute
/// than `as` (a buffer where a parameter goes, a submodule, ...), which Python's `register_*`
/// refuse; a utility checks every name it adds before it changes anything, so that a refusal
/// leaves the module as it was. The same kind is replaced in place, as in Python.
void check_free(torch::nn::Module& module, const std::string& name, Attribute as);

/// `clone` for a module of modhooks' own without children (a parametrization): a copy of the
/// object whose parameters and buffers are copies, moved to `device` where given.
template <class T>
std::shared_ptr<torch::nn::Module> clone_leaf(const T& self,
                                              const torch::optional<torch::Device>& device) {
  at::NoGradGuard no_grad;
  auto copy = std::make_shared<T>(self);
  for (TensorDict* table : {&parameters_of(*copy), &buffers_of(*copy)}) {
    for (auto& item : *table) {
      at::Tensor& tensor = item.value();
      const bool requires_grad = tensor.requires_grad();
      tensor = (device ? tensor.to(*device) : tensor).clone().detach();
      tensor.set_requires_grad(requires_grad);
    }
  }
  return copy;
}

/// Python's `Parameter(tensor.data)`: a leaf on the same storage that requires grad.
at::Tensor new_parameter(const at::Tensor& tensor);

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
