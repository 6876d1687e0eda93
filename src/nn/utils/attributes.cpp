// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "attributes.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <sstream>

#include "clone.h"
#include "modhooks/core/error.h"
#include "modhooks/register.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
template <>
ModuleTable<nn::utils::detail::Utilities, NnOwner>&
nn_table<nn::utils::detail::Utilities>() noexcept {
  static ModuleTable<nn::utils::detail::Utilities, NnOwner> table;
  return table;
}
}  // namespace detail

namespace nn::utils::detail {
namespace {

// libtorch keeps a module's parameter, buffer and child tables private and can only add to them;
// Python's utilities delete from them. An explicit instantiation may name a private member
// ([temp.spec.general]/6), so this one hands out pointers to the three members, and nothing else
// reaches past libtorch's access control.
struct ParametersTag {
  using type = TensorDict torch::nn::Module::*;
  friend type member(ParametersTag);
};
struct BuffersTag {
  using type = TensorDict torch::nn::Module::*;
  friend type member(BuffersTag);
};
struct ChildrenTag {
  using type =
      torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>> torch::nn::Module::*;
  friend type member(ChildrenTag);
};
template <class Tag, typename Tag::type Member>
struct Expose {
  friend typename Tag::type member(Tag) { return Member; }
};
template struct Expose<ParametersTag, &torch::nn::Module::parameters_>;
template struct Expose<BuffersTag, &torch::nn::Module::buffers_>;
template struct Expose<ChildrenTag, &torch::nn::Module::children_>;

}  // namespace

TensorDict& parameters_of(torch::nn::Module& module) { return module.*member(ParametersTag{}); }
TensorDict& buffers_of(torch::nn::Module& module) { return module.*member(BuffersTag{}); }
torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>& children_of(
    torch::nn::Module& module) {
  return module.*member(ChildrenTag{});
}

std::string module_repr(const torch::nn::Module& module) {
  std::ostringstream out;
  out << module;
  return out.str();
}

at::Tensor find_tensor(torch::nn::Module& module, const std::string& name) {
  if (const at::Tensor* found = parameters_of(module).find(name)) return *found;
  if (const at::Tensor* found = buffers_of(module).find(name)) return *found;
  if (auto utilities = find_utilities(module)) {
    for (const auto& applied : utilities->applied) {
      if (applied->name == name) return applied->member.get();
    }
  }
  return {};
}

at::Tensor get_tensor(torch::nn::Module& module, const std::string& name) {
  at::Tensor found = find_tensor(module, name);
  if (!found.defined()) {
    modhooks::detail::fail<AttributeError>("nn.utils.no_attribute",
                                           "'" + modhooks::detail::python_class_name(module) +
                                               "' object has no attribute '" + name + "'");
  }
  return found;
}

void Applied::remove_hooks() noexcept {
  for (RemovableHandle& handle : handles) handle.remove();
  handles.clear();
}

namespace {

std::atomic<int> cached_scopes{0};
std::atomic<std::uint64_t> cached_scope_number{1};
std::mutex cached_scopes_mutex;  // orders the scopes' beginnings and ends

/// A module whose forwards this thread holds apart (see `Utilities`): `owner` where this entry
/// took `utilities->forwards`, not where a call of the module nested in its own forward found it
/// held already.
struct Held {
  std::shared_ptr<Utilities> utilities;
  bool shared;
  bool owner;
};
thread_local std::vector<Held> held;

const Held* held_here(const Utilities& utilities) noexcept {
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    if (it->utilities.get() == &utilities) return &*it;
  }
  return nullptr;
}

/// Whether every utility of the module holds the value of the `Cached` scope `scope`.
bool all_computed_in(const Utilities& utilities, torch::nn::Module& module, std::uint64_t scope) {
  for (const auto& applied : utilities.applied) {
    if (!applied->cacheable(module) || !applied->computed_in(scope)) return false;
  }
  return true;
}

/// The pre-hook before the first utility's: holds the module's forwards apart, shared where a
/// `Cached` scope has every value computed already, exclusively otherwise.
void enter_forward(const std::shared_ptr<Utilities>& utilities, torch::nn::Module& module) {
  if (const Held* outer = held_here(*utilities)) {
    held.push_back({utilities, outer->shared, false});
    return;
  }
  const std::uint64_t scope = cached_scope();
  if (scope != 0 && all_computed_in(*utilities, module, scope)) {
    utilities->forwards.lock_shared();
    if (all_computed_in(*utilities, module, scope)) {
      held.push_back({utilities, true, true});
      return;
    }
    utilities->forwards.unlock_shared();
  }
  utilities->forwards.lock();
  held.push_back({utilities, false, true});
}

/// The always-call forward hook: lets go of what `enter_forward` took.
void exit_forward(const Utilities& utilities) noexcept {
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    if (it->utilities.get() != &utilities) continue;
    const Held entry = std::move(*it);
    held.erase(std::next(it).base());
    if (!entry.owner) return;
    if (entry.shared) {
      entry.utilities->forwards.unlock_shared();
    } else {
      entry.utilities->forwards.unlock();
    }
    return;
  }
}

/// The module's first utility registers the hooks that hold its forwards apart.
void guard_forwards(torch::nn::Module& module, Utilities& utilities) {
  if (!utilities.guards.empty()) return;
  std::weak_ptr<Utilities> weak = modhooks::nn::utils::detail::find_utilities(module);
  utilities.guards.push_back(modhooks::register_forward_pre_hook(
      module, [weak](torch::nn::Module& self, const std::vector<c10::IValue>&) {
        if (auto live = weak.lock()) enter_forward(live, self);
      }));
  utilities.guards.push_back(modhooks::register_forward_hook(
      module,
      [weak](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (auto live = weak.lock()) exit_forward(*live);
      },
      ForwardHookOptions().always_call(true)));
}

}  // namespace

std::uint64_t cached_scope() noexcept {
  return cached_scopes.load(std::memory_order_acquire) > 0
             ? cached_scope_number.load(std::memory_order_acquire)
             : 0;
}

void enter_cached_scope() noexcept {
  const std::lock_guard<std::mutex> lock(cached_scopes_mutex);
  cached_scopes.fetch_add(1, std::memory_order_acq_rel);
}

void leave_cached_scope() noexcept {
  const std::lock_guard<std::mutex> lock(cached_scopes_mutex);
  // The last scope ends: the next one gets a number of its own, so that no value of this one is
  // taken as that one's. Under the mutex, no scope begins between the two.
  if (cached_scopes.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    cached_scope_number.fetch_add(1, std::memory_order_acq_rel);
  }
}

bool Applied::cacheable(torch::nn::Module& module) const {
  return !at::GradMode::is_enabled() && !module.is_training();
}

void Applied::assign(const at::Tensor& value) {
  member.get() = value;
  scope_.store(0, std::memory_order_release);
}

namespace {

/// The current stream of the device `tensor` is on.
c10::Stream current_stream(const at::Tensor& tensor) {
  return c10::impl::getDeviceGuardImpl(tensor.device().type())->getStream(tensor.device());
}

}  // namespace

void Applied::before_forward(torch::nn::Module& module) {
  const std::uint64_t scope = cached_scope();
  if (scope != 0 && cacheable(module)) {
    if (computed_in(scope)) {
      read_on_this_stream();
      return;
    }
    at::Tensor value = compute(module);
    member.get() = value;
    computed_.reset();
    if (!value.device().is_cpu()) {
      computed_.emplace(value.device().type());
      computed_->record(current_stream(value));
    }
    scope_.store(scope, std::memory_order_release);
    return;
  }
  // Each read before the last one computes too, as in Python: a parametrization with state
  // (spectral norm's power iteration) steps at each.
  for (int read = reads_per_forward(module); read > 1; --read) (void)compute(module);
  assign(compute(module));
}

void Applied::read_on_this_stream() const {
  const at::Tensor& value = member.get();
  if (!value.defined() || value.device().is_cpu()) return;
  const c10::Stream stream = current_stream(value);
  if (computed_) computed_->block(stream);
  value.record_stream(stream);
}

std::shared_ptr<Utilities> utilities_for(torch::nn::Module& module) {
  clone_with_utilities();
  return modhooks::detail::entry_for(modhooks::detail::nn_table<Utilities>(), module);
}

std::shared_ptr<Utilities> find_utilities(const torch::nn::Module& module) {
  return modhooks::detail::entry_find(modhooks::detail::nn_table<Utilities>(), module);
}

RemovableHandle recompute_before_forward(torch::nn::Module& module, Utilities& utilities,
                                         const std::shared_ptr<Applied>& applied) {
  guard_forwards(module, utilities);
  std::weak_ptr<Applied> weak = applied;
  std::weak_ptr<Utilities> owner = find_utilities(module);
  return modhooks::register_forward_pre_hook(
      module, [weak, owner](torch::nn::Module& self, const std::vector<c10::IValue>&) {
        auto live = weak.lock();
        if (!live) return;
        // A forward that holds the module's forwards shared reads what its scope computed.
        const auto utilities = owner.lock();
        const Held* entry = utilities ? held_here(*utilities) : nullptr;
        if (entry != nullptr && entry->shared) {
          live->read_on_this_stream();
          return;
        }
        live->before_forward(self);
      });
}

void install(torch::nn::Module& module, Utilities& utilities,
             const std::shared_ptr<Applied>& applied) {
  applied->assign(applied->compute(module));
  applied->handles.push_back(recompute_before_forward(module, utilities, applied));
  utilities.applied.push_back(applied);
}

void uninstall(torch::nn::Module& module, const std::shared_ptr<Applied>& applied) {
  applied->remove_hooks();
  if (auto utilities = find_utilities(module)) {
    auto& list = utilities->applied;
    list.erase(std::remove(list.begin(), list.end(), applied), list.end());
    if (list.empty()) {
      for (RemovableHandle& handle : utilities->guards) handle.remove();
      utilities->guards.clear();
    }
  }
}

void restore_parameter(torch::nn::Module& module, const std::shared_ptr<Applied>& applied,
                       std::initializer_list<std::string> added, const at::Tensor& value,
                       bool requires_grad) {
  uninstall(module, applied);
  for (const std::string& name : added) {
    TensorDict& parameters = parameters_of(module);
    if (parameters.contains(name)) {
      parameters.erase(name);
    } else {
      buffers_of(module).erase(name);
    }
  }
  applied->member.get() = module.register_parameter(applied->name, value, requires_grad);
}

at::Tensor take_parameter(torch::nn::Module& module, const std::string& name) {
  TensorDict& parameters = parameters_of(module);
  const at::Tensor* found = parameters.find(name);
  if (!found) modhooks::detail::fail<KeyError>("nn.utils.no_parameter", "'" + name + "'");
  at::Tensor parameter = *found;
  parameters.erase(name);
  return parameter;
}

at::Tensor take_buffer(torch::nn::Module& module, const std::string& name) {
  TensorDict& buffers = buffers_of(module);
  const at::Tensor* found = buffers.find(name);
  if (!found) modhooks::detail::fail<KeyError>("nn.utils.no_buffer", "'" + name + "'");
  at::Tensor buffer = *found;
  buffers.erase(name);
  return buffer;
}

void put_buffer(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor) {
  TensorDict& buffers = buffers_of(module);
  if (at::Tensor* found = buffers.find(name)) {
    *found = tensor;
  } else {
    module.register_buffer(name, tensor);
  }
}

void put_parameter(torch::nn::Module& module, const std::string& name, const at::Tensor& tensor,
                   bool requires_grad) {
  TensorDict& parameters = parameters_of(module);
  if (at::Tensor* found = parameters.find(name)) {
    *found = tensor;
    found->set_requires_grad(requires_grad);
  } else {
    module.register_parameter(name, tensor, requires_grad);
  }
}

void check_free(torch::nn::Module& module, const std::string& name, Attribute as) {
  const bool parameter = parameters_of(module).contains(name);
  const bool buffer = buffers_of(module).contains(name);
  bool child = false;
  for (const auto& item : module.named_children()) child = child || item.key() == name;
  const bool taken = (parameter && as != Attribute::kParameter) ||
                     (buffer && as != Attribute::kBuffer) || (child && as != Attribute::kModule);
  if (taken) {
    modhooks::detail::fail<KeyError>("nn.utils.name_taken",
                                     "\"attribute '" + name + "' already exists\"");
  }
}

at::Tensor new_parameter(const at::Tensor& tensor) {
  at::Tensor parameter = tensor.variable_data();
  parameter.set_requires_grad(true);
  return parameter;
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
