// SPDX-License-Identifier: BSD-3-Clause
// Hooks with wrong signatures, one per MODHOOKS_CASE: each must fail to compile, and the
// compiler's output must carry the static_assert that says why (tests/compile_fail/check.cmake).
// MODHOOKS_CASE 0 is the control: right signatures, which must compile.
#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "modhooks/aoti/point.h"
#include "modhooks/register.h"
#include "modhooks/state/state_hooks.h"

#ifndef MODHOOKS_CASE
#error "MODHOOKS_CASE must be defined"
#endif

using modhooks::TensorList;
using Args = std::vector<c10::IValue>;

struct Net : torch::nn::Module {};

// A point of an exported model (never defined: these cases are compiled, not linked).
const modhooks::aoti::Point& exported_point();

void wrong_hook(std::shared_ptr<Net>& net) {
#if MODHOOKS_CASE == 0
  modhooks::register_forward_pre_hook(net, [](torch::nn::Module&, const Args&) {});
  modhooks::register_forward_pre_hook(net, [](Net&, const Args& args) { return args; });
  modhooks::register_forward_pre_hook(
      net, [](torch::nn::Module&, const Args&) -> std::optional<Args> { return std::nullopt; });
  modhooks::register_forward_hook(
      net, [](torch::nn::Module&, const Args&, const c10::IValue& out) { return out; });
  modhooks::register_forward_hook(
      net, [](torch::nn::Module&, const Args&, const c10::IValue&) { return torch::zeros({1}); });
  modhooks::register_full_backward_hook(
      net, [](torch::nn::Module&, const TensorList&, const TensorList&) {});
  modhooks::register_full_backward_hook(
      net, [](torch::nn::Module&, const TensorList& gin, const TensorList&) { return gin; });
  modhooks::register_full_backward_pre_hook(
      net, [](torch::nn::Module&, const TensorList&) { return std::nullopt; });
  modhooks::register_state_dict_pre_hook(net, [](torch::nn::Module&, const std::string&, bool) {});
  modhooks::register_module_forward_hook([](auto&, const Args&, const c10::IValue&) {});
  modhooks::register_forward_hook(
      exported_point(), [](const modhooks::aoti::Point&, const Args&, const c10::IValue&) {});
  modhooks::register_forward_pre_hook(exported_point(),
                                      [](const modhooks::aoti::Point&, const Args&) {});
  modhooks::register_module_forward_hook(
      [](const modhooks::aoti::Point&, const Args&, const c10::IValue&) {});
#elif MODHOOKS_CASE == 1   // forward hook: arguments of the wrong types
  modhooks::register_forward_hook(net, [](torch::nn::Module&, int, const std::string&) {});
#elif MODHOOKS_CASE == 2   // forward hook: output missing
  modhooks::register_forward_hook(net, [](torch::nn::Module&, const Args&) {});
#elif MODHOOKS_CASE == 3   // backward hook: grad_output missing (wrong arity)
  modhooks::register_full_backward_hook(net, [](torch::nn::Module&, const TensorList&) {});
#elif MODHOOKS_CASE == 4   // backward pre-hook: takes the module by pointer
  modhooks::register_full_backward_pre_hook(net, [](Net*, const TensorList&) {});
#elif MODHOOKS_CASE == 5   // state-dict pre-hook returning a value
  modhooks::register_state_dict_pre_hook(
      net, [](torch::nn::Module&, const std::string&, bool) { return 1; });
#elif MODHOOKS_CASE == 6   // global hook whose first parameter is no module
  modhooks::register_module_forward_hook([](int, const Args&, const c10::IValue&) {});
#elif MODHOOKS_CASE == 7   // pre-hook returning a type that is not args
  modhooks::register_forward_pre_hook(
      net, [](torch::nn::Module&, const Args&) { return std::string(); });
#elif MODHOOKS_CASE == 8   // backward hook returning one tensor instead of a list
  modhooks::register_full_backward_hook(
      net, [](torch::nn::Module&, const TensorList& gin, const TensorList&) { return gin[0]; });
#elif MODHOOKS_CASE == 9   // pre-hook returning an int (std::vector's explicit size constructor)
  modhooks::register_forward_pre_hook(net, [](torch::nn::Module&, const Args&) { return 2; });
#elif MODHOOKS_CASE == 10  // backward hook on a point of an exported model (inference only)
  modhooks::register_full_backward_hook(
      exported_point(), [](const modhooks::aoti::Point&, const TensorList&, const TensorList&) {});
#elif MODHOOKS_CASE == 11  // state-dict hook on a point: points have no state
  modhooks::register_state_dict_pre_hook(
      exported_point(), [](const modhooks::aoti::Point&, const std::string&, bool) {});
#elif MODHOOKS_CASE == 12  // a global backward hook for points
  modhooks::register_module_full_backward_hook(
      [](const modhooks::aoti::Point&, const TensorList&, const TensorList&) {});
#else
#error "unknown MODHOOKS_CASE"
#endif
}
