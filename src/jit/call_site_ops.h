// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the graph rewriting (instrument.cpp) and the operators it puts at call sites
// (call.cpp) agree on: the operators' names and how a call site is described.
#pragma once

#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// `modhooks::call_module`, `modhooks::enter` and `modhooks::exit`. Defined beside the operators'
/// registration: the rewriting names its operators through these, so whatever links the
/// rewriting links the registration too, also from a static libmodhooks.
c10::Symbol call_module_symbol();
c10::Symbol enter_symbol();
c10::Symbol exit_symbol();

/// Where `enter` and `exit` nodes keep the call site's description for error messages: after
/// inlining, `exit` no longer sees the call it follows.
c10::Symbol site_attr();

/// "submodule `layer1.0` (BasicBlock) of ResNet": the attribute path the call site `node` took
/// from its graph's `self`.
std::string describe_call_site(const torch::jit::Node* node, const c10::ClassType& callee);

}  // namespace detail
MODHOOKS_END_NAMESPACE
