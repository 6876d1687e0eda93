// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>

#include <string>

#include "modhooks/registration/detail/module_ref.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/state/state_hooks.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// Python's `Module.state_dict(prefix=, keep_vars=)`: parameters, then persistent buffers, then
/// children, depth-first, with Python's key names and `_metadata`; tensors are detached unless
/// `keep_vars`. State-dict pre-hooks and post-hooks fire on every submodule with its prefix.
///
/// **Example**:
/// \code
///   torch::nn::Module& base = *net;
///   modhooks::StateDict sd = modhooks::state_dict(base);  // "fc.weight", "fc.bias", ...
/// \endcode
StateDict state_dict(torch::nn::Module& module, const std::string& prefix = "",
                     bool keep_vars = false);

/// Python's `Module.load_state_dict(state_dict, strict=, assign=)`, with its hooks, checks and
/// error texts ("Error(s) in loading state_dict for Net: ..."). Beyond Python it is
/// all-or-nothing: when it raises, every parameter and buffer it wrote is put back (values,
/// objects and storages; not what hooks did themselves). Keys are matched in one pass, linear in
/// their number; load pre-hooks on a module below the root add one pass over the dict each.
/// Values are copied with `copy_` (dtype and device converted, identity and storage kept);
/// `assign` swaps the checkpoint's tensors in instead, keeping each tensor object (so optimizers
/// holding it see the new values) and its `requires_grad`.
///
/// **Example**:
/// \code
///   torch::nn::Module& base = *net;
///   modhooks::IncompatibleKeys keys =
///       modhooks::load_state_dict(base, modhooks::load("net.pt"), /*strict=*/false);
/// \endcode
IncompatibleKeys load_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                                 bool strict = true, bool assign = false);

/// The same for a TorchScript module tree (`torch::jit::load`ed or built in C++): parameters,
/// buffers and submodules with the same traversal, hooks, error texts and all-or-nothing load.
///
/// **Example**:
/// \code
///   torch::jit::Module model = torch::jit::load("model.pt");
///   modhooks::save(modhooks::state_dict(model), "weights.safetensors");
/// \endcode
StateDict state_dict(const torch::jit::Module& module, const std::string& prefix = "",
                     bool keep_vars = false);
/// `load_state_dict` for a TorchScript module tree, as `state_dict` above.
///
/// **Example**:
/// \code
///   torch::jit::Module model = torch::jit::load("model.pt");
///   modhooks::load_state_dict(model, modhooks::load("weights.safetensors"));
/// \endcode
IncompatibleKeys load_state_dict(const torch::jit::Module& module, const StateDict& state_dict,
                                 bool strict = true, bool assign = false);

/// The same for every other spelling of an nn module (`shared_ptr<T>`, `ModuleHolder<T>`).
///
/// **Example**:
/// \code
///   torch::nn::Linear fc(4, 2);
///   modhooks::StateDict sd = modhooks::state_dict(fc);  // "weight", "bias"
/// \endcode
template <class M, detail::IfNnModule<M> = 0>
StateDict state_dict(M&& module, const std::string& prefix = "", bool keep_vars = false) {
  return state_dict(static_cast<torch::nn::Module&>(detail::module_ref(module)), prefix, keep_vars);
}

/// `load_state_dict` for every other spelling of an nn module (`shared_ptr<T>`,
/// `ModuleHolder<T>`).
///
/// **Example**:
/// \code
///   torch::nn::Linear fc(4, 2);
///   modhooks::load_state_dict(fc, modhooks::load("fc.pt"), /*strict=*/true, /*assign=*/true);
/// \endcode
template <class M, detail::IfNnModule<M> = 0>
IncompatibleKeys load_state_dict(M&& module, const StateDict& state_dict, bool strict = true,
                                 bool assign = false) {
  return load_state_dict(static_cast<torch::nn::Module&>(detail::module_ref(module)), state_dict,
                         strict, assign);
}

MODHOOKS_END_NAMESPACE
