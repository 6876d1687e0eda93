// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_jit
/// @{

/// Python's `Module.get_submodule` for TorchScript modules: the submodule at the dotted path
/// `name` ("block.0"); `""` is `root` itself. The result is a handle to the same object, so
/// hooks registered on it fire wherever the model calls that submodule.
///
/// Throws `modhooks::Error` with Python's text ("Net has no attribute `blokc`", "`weight` is
/// not an nn.Module" for "fc.weight"). A frozen or inference-optimized model keeps no submodules to
/// call, and the message says so.
///
/// **Example**:
/// \code
///   torch::jit::Module model = torch::jit::load("resnet.pt");
///   torch::jit::Module block = modhooks::submodule(model, "layer1.0");
///   auto h = modhooks::register_forward_hook(block, [](auto&, auto&, const c10::IValue& out) {
///     std::cout << out.toTensor().mean() << "\n";
///   });
///   model.forward({x});   // h fires when layer1's forward calls block 0
/// \endcode
torch::jit::Module submodule(const torch::jit::Module& root, const std::string& name);

/// Rewrites now every submodule call site in the code of `root`'s compilation unit (the loaded
/// file, or the Python process that scripted it), so that every call, hooked or not, passes
/// through modhooks. Registering a hook on a submodule does this by itself for the call sites
/// of that submodule's type only; call `instrument` for global hooks, or to pay the rewriting
/// before the first timed run.
///
/// **Example**:
/// \code
///   modhooks::instrument(model);
///   auto h = modhooks::register_module_forward_hook([](torch::jit::Module& m, auto&, auto&) {
///     std::cout << m.type()->repr_str() << "\n";
///   });
/// \endcode
void instrument(const torch::jit::Module& root);

/// Puts the original methods back, exactly the objects the model had before; `save` then
/// writes the original code. Hooks stay registered but inner ones no longer fire, until the
/// next registration on a submodule or `instrument`. Also happens by itself when the last hook
/// on the model's submodules is removed, unless `instrument` was called.
///
/// **Example**:
/// \code
///   modhooks::uninstrument(model);
///   model.save("model.pt");   // plain libtorch and Python load it
/// \endcode
void uninstrument(const torch::jit::Module& root);

/// @}

MODHOOKS_END_NAMESPACE
