// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/state/detail/load.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/state/state_hooks.h"
#include "modhooks/version.h"
#include "texts.h"

// The state-dict traversal, written once for every kind of module with state: the walk and
// `state_dict`; the load is loader.h.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The traversal behind `state_dict` and `load_state_dict`, written once for every module kind.
/// An `Adapter` tells how to walk its kind:
///   using Module = ...;                                  // what hooks receive
///   static std::vector<std::pair<std::string, std::shared_ptr<Module>>> children(Module&);
///   static std::pair<const std::string&, const at::Tensor&> entry(const Item&);
///                                                      // a named_parameters() / named_buffers()
///                                                      // item as (name, tensor)
///   static std::shared_ptr<StateHooks<Module>> hooks(Module&);   // null when none
///   static std::string class_name(Module&);             // Python's type(self).__name__
///   static std::int64_t version(Module&);              // Python's `_version` of its class
///   template <class Edit>                              // `torch.nn`'s built-in upgrades of
///   static void upgrade(Module&, const std::string& prefix, const Metadata& local_metadata,
///                       const StateDict&, Edit&& edit, std::vector<std::string>& errors);
///                                                      // old state dicts; `edit()` gives the
///                                                      // load's own copy of the dict to change

/// One tensor a module contributes to its state dict.
struct OwnTensor {
  std::string name;
  at::Tensor tensor;
};

/// A module's own tensors in its state dict: defined parameters, then defined buffers not
/// marked non-persistent. libtorch registers an absent bias as an undefined tensor where Python
/// has None, and Python skips those.
template <class Adapter>
std::vector<OwnTensor> own_tensors(typename Adapter::Module& module) {
  std::vector<OwnTensor> out;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    const auto [name, tensor] = Adapter::entry(item);
    if (tensor.defined()) out.push_back(OwnTensor{name, tensor});
  }
  const auto state = Adapter::hooks(module);
  std::unique_lock<std::mutex> lock;
  if (state) lock = std::unique_lock<std::mutex>(state->mutex);
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    const auto [name, tensor] = Adapter::entry(item);
    if (!tensor.defined() || (state && state->non_persistent_buffers.count(name))) continue;
    out.push_back(OwnTensor{name, tensor});
  }
  return out;
}

/// The version a module's state dict is written with: the one given by
/// `set_state_dict_version`, or its class's.
template <class Adapter>
std::int64_t version_of(typename Adapter::Module& module,
                        StateHooks<typename Adapter::Module>* hooks) {
  if (hooks) {
    std::lock_guard<std::mutex> lock(hooks->mutex);
    if (hooks->version) return *hooks->version;
  }
  return Adapter::version(module);
}

template <class Adapter>
void collect_state_dict(typename Adapter::Module& module, const std::string& prefix, bool keep_vars,
                        StateDict& out) {
  const auto hooks = Adapter::hooks(module);
  Metadata local_metadata{{"version", version_of<Adapter>(module, hooks.get())}};
  out.metadata().insert_or_assign(without_dot(prefix), local_metadata);
  if (hooks) {
    hooks->state_dict_pre.for_each([&](const auto& hook) { hook(module, prefix, keep_vars); });
  }
  for (auto& own : own_tensors<Adapter>(module)) {
    out.insert_or_assign(prefix + own.name, keep_vars ? own.tensor : own.tensor.detach());
  }
  for (auto& [name, child] : Adapter::children(module)) {
    collect_state_dict<Adapter>(*child, prefix + name + ".", keep_vars, out);
  }
  if (hooks) {
    hooks->state_dict_post.for_each(
        [&](const auto& hook) { hook(module, out, prefix, local_metadata); });
  }
}

/// Python's `Module.state_dict(prefix=, keep_vars=)`: depth-first, own parameters then
/// persistent buffers then children; pre-hooks in pre-order, post-hooks in post-order, each
/// with its module's prefix; tensors detached unless `keep_vars`.
template <class Adapter>
StateDict state_dict(typename Adapter::Module& module, const std::string& prefix, bool keep_vars) {
  StateDict out;
  collect_state_dict<Adapter>(module, prefix, keep_vars, out);
  return out;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
