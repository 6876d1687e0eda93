// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "modhooks/core/detail/adapt.h"
#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/detail/module_table.h"
#include "modhooks/registration/detail/module_ref.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// What `load_state_dict` returns (Python's `_IncompatibleKeys`); post-hooks edit it in place.
///
/// **Example**:
/// \code
///   modhooks::IncompatibleKeys keys = modhooks::load_state_dict(net, sd, /*strict=*/false);
///   for (const std::string& key : keys.missing_keys) std::cout << "missing " << key << "\n";
/// \endcode
struct IncompatibleKeys {
  /// Keys the module has and the state dict lacks.
  std::vector<std::string> missing_keys;
  /// Keys the state dict has and the module lacks.
  std::vector<std::string> unexpected_keys;
};

/// @}

namespace detail {

template <class M>
using StateDictPreHookFn = std::function<void(M&, const std::string&, bool)>;
template <class M>
using StateDictPostHookFn =
    std::function<void(M&, StateDict&, const std::string&, const Metadata&)>;
template <class M>
using LoadStateDictPreHookFn = std::function<void(
    M&, StateDict&, const std::string&, const Metadata&, bool, std::vector<std::string>&,
    std::vector<std::string>&, std::vector<std::string>&)>;
template <class M>
using LoadStateDictPostHookFn = std::function<void(M&, IncompatibleKeys&)>;

/// What the state layer keeps per module: its four hook lists, the names of its
/// non-persistent buffers and the version its state dicts carry. Kept apart from the call-path
/// tables, which never pay for it.
template <class M>
struct StateHooks {
  HookList<StateDictPreHookFn<M>> state_dict_pre;
  HookList<StateDictPostHookFn<M>> state_dict_post;
  HookList<LoadStateDictPreHookFn<M>> load_pre;
  HookList<LoadStateDictPostHookFn<M>> load_post;
  std::mutex mutex;  // guards the two below
  std::set<std::string> non_persistent_buffers;
  std::optional<std::int64_t> version;  // from `set_state_dict_version`
};

using NnStateHooks = StateHooks<torch::nn::Module>;
using JitStateHooks = StateHooks<torch::jit::Module>;

/// The state tables of `module`, or null / created on first use.
std::shared_ptr<NnStateHooks> find_state_hooks(const torch::nn::Module& module);
std::shared_ptr<NnStateHooks> state_hooks_for(torch::nn::Module& module);
/// The same entry for the data beside the hooks (non-persistent buffers, version), which
/// modules not owned by a shared_ptr may have too: their constructors register buffers.
std::shared_ptr<NnStateHooks> state_data_for(torch::nn::Module& module);
std::shared_ptr<JitStateHooks> find_state_hooks(const torch::jit::Module& module);
std::shared_ptr<JitStateHooks> state_hooks_for(torch::jit::Module& module);
inline std::shared_ptr<JitStateHooks> state_data_for(torch::jit::Module& module) {
  return state_hooks_for(module);  // a TorchScript object is always owned
}

}  // namespace detail

/// \addtogroup api_state
/// @{

/// Python's `Module.register_state_dict_pre_hook`: `hook(module, prefix, keep_vars)` runs
/// before `state_dict` collects the module's tensors.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_state_dict_pre_hook(
///       net, [](torch::nn::Module&, const std::string& prefix, bool keep_vars) {
///         std::cout << "collecting " << prefix << "\n";
///       });
/// \endcode
template <class M, class F, detail::IfStateModule<M> = 0>
RemovableHandle register_state_dict_pre_hook(M&& module, F hook) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::state_hooks_for(detail::module_ref(module)), &detail::StateHooks<B>::state_dict_pre,
      detail::adapt_void_hook<T, const std::string&, bool>(std::move(hook)), false);
}

/// Python's `Module.register_state_dict_post_hook`: `hook(module, state_dict, prefix,
/// local_metadata)` runs after the module's subtree was collected and may edit the dict.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_state_dict_post_hook(
///       net, [](torch::nn::Module&, modhooks::StateDict& sd, const std::string& prefix,
///               const modhooks::Metadata&) { sd.erase(prefix + "cache"); });
/// \endcode
template <class M, class F, detail::IfStateModule<M> = 0>
RemovableHandle register_state_dict_post_hook(M&& module, F hook) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::state_hooks_for(detail::module_ref(module)), &detail::StateHooks<B>::state_dict_post,
      detail::adapt_void_hook<T, StateDict&, const std::string&, const Metadata&>(std::move(hook)),
      false);
}

/// Python's `Module.register_load_state_dict_pre_hook`: `hook(module, state_dict, prefix,
/// local_metadata, strict, missing_keys, unexpected_keys, error_msgs)` runs before the module's
/// keys are checked and may rename, add or drop keys of its subtree. `strict` is always true,
/// as in Python.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_load_state_dict_pre_hook(
///       net, [](torch::nn::Module&, modhooks::StateDict& sd, const std::string& prefix,
///               const modhooks::Metadata&, bool, auto&, auto&, auto&) {
///         if (sd.contains(prefix + "gamma")) {  // a name older checkpoints used
///           sd.insert_or_assign(prefix + "weight", sd.at(prefix + "gamma"));
///           sd.erase(prefix + "gamma");
///         }
///       });
/// \endcode
template <class M, class F, detail::IfStateModule<M> = 0>
RemovableHandle register_load_state_dict_pre_hook(M&& module, F hook) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(
      detail::state_hooks_for(detail::module_ref(module)), &detail::StateHooks<B>::load_pre,
      detail::adapt_void_hook<T, StateDict&, const std::string&, const Metadata&, bool,
                              std::vector<std::string>&, std::vector<std::string>&,
                              std::vector<std::string>&>(std::move(hook)),
      false);
}

/// Python's `Module.register_load_state_dict_post_hook`: `hook(module, incompatible_keys)` runs
/// after the load and may edit the keys in place; strict errors come from the edited lists.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_load_state_dict_post_hook(
///       net, [](torch::nn::Module&, modhooks::IncompatibleKeys& keys) {
///         keys.missing_keys.clear();  // a strict load accepts missing keys
///       });
/// \endcode
template <class M, class F, detail::IfStateModule<M> = 0>
RemovableHandle register_load_state_dict_post_hook(M&& module, F hook) {
  using T = detail::ModuleType<M>;
  using B = detail::BaseOf<T>;
  return detail::add_hook(detail::state_hooks_for(detail::module_ref(module)),
                          &detail::StateHooks<B>::load_post,
                          detail::adapt_void_hook<T, IncompatibleKeys&>(std::move(hook)), false);
}

/// Python's `Module.register_buffer(name, tensor, persistent)`: a non-persistent buffer belongs
/// to the module but not to its state dict.
///
/// **Example**:
/// \code
///   modhooks::register_buffer(net, "running_count", torch::zeros({}), /*persistent=*/false);
/// \endcode
template <class M, detail::IfStateModule<M> = 0>
void register_buffer(M&& module, std::string name, at::Tensor tensor, bool persistent = true) {
  auto& m = detail::module_ref(module);
  auto state = detail::state_data_for(m);
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (persistent) {
      state->non_persistent_buffers.erase(name);
    } else {
      state->non_persistent_buffers.insert(name);
    }
  }
  m.register_buffer(std::move(name), std::move(tensor));
}

/// Python's `_version` class attribute, per module: `state_dict` writes `version` into the
/// module's `_metadata` entry, and a load pre-hook upgrades older state dicts by reading it from
/// `local_metadata` (absent when the dict has no metadata, as Python's `None`).
///
/// **Example**:
/// \code
///   modhooks::set_state_dict_version(net, 2);  // version 2 renamed `gamma` to `weight`
///   modhooks::register_load_state_dict_pre_hook(
///       net, [](torch::nn::Module&, modhooks::StateDict& sd, const std::string& prefix,
///               const modhooks::Metadata& meta, bool, auto&, auto&, auto&) {
///         auto v = meta.find("version");
///         if ((v == meta.end() || v->second < 2) && sd.contains(prefix + "gamma")) {
///           sd.insert_or_assign(prefix + "weight", sd.at(prefix + "gamma"));
///           sd.erase(prefix + "gamma");
///         }
///       });
/// \endcode
template <class M, detail::IfStateModule<M> = 0>
void set_state_dict_version(M&& module, std::int64_t version) {
  auto state = detail::state_data_for(detail::module_ref(module));
  std::lock_guard<std::mutex> lock(state->mutex);
  state->version = version;
}

/// @}

MODHOOKS_END_NAMESPACE
