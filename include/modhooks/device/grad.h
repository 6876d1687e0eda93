// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// Ready-made backward hooks that rewrite gradients on each tensor's own device. Each factory
/// returns a small copyable callable that works both as a full backward pre-hook
/// `(module, grad_output) -> new grad_output` and as a full backward hook
/// `(module, grad_input, grad_output) -> new grad_input`, for any module type:
///
///   modhooks::register_full_backward_hook(net, modhooks::grad::clip_norm(1.0));
///
/// Undefined tensors (Python's None) pass through. The hooks never write into the tensors they
/// are given: autograd may still use those buffers, and PyTorch's hook contract is to return
/// replacements. So each rewrite produces new tensors (one out-of-place ATen op on CPU/CUDA; a
/// fresh buffer from the tensor's own allocator written by ACL on an NPU).

#include <ATen/core/Tensor.h>
#include <c10/util/Type.h>
#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace grad {
namespace detail {

using TensorList = std::vector<at::Tensor>;

TensorList zeros(const TensorList& grads);
TensorList scaled(const TensorList& grads, double factor);
/// The 2-norm of all defined tensors of `grads` taken together, on their own devices.
double total_norm(const TensorList& grads);
/// `grads` scaled by max_norm / (norm + 1e-6) when their total norm exceeds max_norm.
std::optional<TensorList> clipped(const TensorList& grads, double max_norm);
/// Position of the first defined tensor of `grads` holding NaN or Inf.
std::optional<std::size_t> first_non_finite(const TensorList& grads);
[[noreturn]] void fail_non_finite(const char* list_name, std::size_t index,
                                  const std::string& module);

template <class M, class = void>
struct HasScriptType : std::false_type {};
template <class M>
struct HasScriptType<M, std::void_t<decltype(std::declval<const M&>().type()->name())>>
    : std::true_type {};

/// What an error calls the module: its name() for nn modules (e.g. "torch::nn::LinearImpl"),
/// the class's qualified name for TorchScript modules, the C++ type name otherwise.
template <class Module>
std::string module_name(const Module& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, Module>) {
    return m.name();
  } else if constexpr (HasScriptType<Module>::value) {
    auto name = m.type()->name();
    return name ? name->qualifiedName() : std::string("ScriptModule");
  } else {
    return c10::demangle(typeid(Module).name());
  }
}

/// The module is named only on failure: building its name costs more than the check on CPU.
template <class Module>
void check_finite(const Module& m, const TensorList& grads, const char* list_name) {
  if (auto index = first_non_finite(grads)) fail_non_finite(list_name, *index, module_name(m));
}

}  // namespace detail

/// \addtogroup api_device
/// @{

namespace detail {

/// The two forms of a hook that rewrites one list of gradients, written once: as a full
/// backward pre-hook it rewrites `grad_output`, as a full backward hook `grad_input`.
/// `Rewrite::rewrite(grads)` returns the new list, or std::nullopt to keep it.
template <class Rewrite>
class GradRewrite {
 public:
  /// As a full backward pre-hook: `grad_output` rewritten. \see \ref api_device
  template <class Module>
  std::optional<std::vector<at::Tensor>> operator()(
      Module&, const std::vector<at::Tensor>& grad_output) const {
    return static_cast<const Rewrite&>(*this).rewrite(grad_output);
  }
  /// As a full backward hook: `grad_input` rewritten. \see \ref api_device
  template <class Module>
  std::optional<std::vector<at::Tensor>> operator()(Module&,
                                                    const std::vector<at::Tensor>& grad_input,
                                                    const std::vector<at::Tensor>&) const {
    return static_cast<const Rewrite&>(*this).rewrite(grad_input);
  }
};

}  // namespace detail

/// Replaces every gradient by zeros.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_hook(frozen, modhooks::grad::Zero());
/// \endcode
class Zero : public detail::GradRewrite<Zero> {
 public:
  /// Zeros of the gradients' shapes. \see \ref api_device
  std::optional<std::vector<at::Tensor>> rewrite(const std::vector<at::Tensor>& grads) const {
    return detail::zeros(grads);
  }
};

/// Multiplies every gradient by a constant.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_pre_hook(fc, modhooks::grad::Scale(0.5));
/// \endcode
class Scale : public detail::GradRewrite<Scale> {
 public:
  /// Multiplies by `factor`. \see \ref api_device
  explicit Scale(double factor) : factor_(factor) {}
  /// The factor. \see \ref api_device
  double factor() const { return factor_; }
  /// The gradients times the factor. \see \ref api_device
  std::optional<std::vector<at::Tensor>> rewrite(const std::vector<at::Tensor>& grads) const {
    return detail::scaled(grads, factor_);
  }

 private:
  double factor_;
};

/// torch.nn.utils.clip_grad_norm_ applied to the hook's gradients: when their total 2-norm
/// exceeds max_norm they are scaled by max_norm / (norm + 1e-6); otherwise they are kept
/// (std::nullopt), as is a NaN norm.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_hook(fc, modhooks::grad::ClipNorm(1.0));
/// \endcode
class ClipNorm : public detail::GradRewrite<ClipNorm> {
 public:
  /// Clips to a total 2-norm of `max_norm`. \see \ref api_device
  explicit ClipNorm(double max_norm) : max_norm_(max_norm) {}
  /// The largest total norm kept as it is. \see \ref api_device
  double max_norm() const { return max_norm_; }
  /// The gradients clipped, or std::nullopt. \see \ref api_device
  std::optional<std::vector<at::Tensor>> rewrite(const std::vector<at::Tensor>& grads) const {
    return detail::clipped(grads, max_norm_);
  }

 private:
  double max_norm_;
};

/// Throws modhooks::Error naming the module and the gradient ("grad_output[1]") that holds NaN
/// or Inf; rewrites nothing. The full-hook form checks grad_output, then grad_input.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_hook(net, modhooks::grad::CheckFinite());
/// \endcode
class CheckFinite {
 public:
  /// As a full backward pre-hook: checks `grad_output`. \see \ref api_device
  template <class Module>
  std::optional<std::vector<at::Tensor>> operator()(
      Module& m, const std::vector<at::Tensor>& grad_output) const {
    detail::check_finite(m, grad_output, "grad_output");
    return std::nullopt;
  }
  /// As a full backward hook: checks `grad_output`, then `grad_input`. \see \ref api_device
  template <class Module>
  std::optional<std::vector<at::Tensor>> operator()(
      Module& m, const std::vector<at::Tensor>& grad_input,
      const std::vector<at::Tensor>& grad_output) const {
    detail::check_finite(m, grad_output, "grad_output");
    detail::check_finite(m, grad_input, "grad_input");
    return std::nullopt;
  }
};

/// A `Zero` hook.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_pre_hook(fc, modhooks::grad::zero());
/// \endcode
inline Zero zero() { return Zero(); }

/// A `Scale` hook.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_pre_hook(fc, modhooks::grad::scale(0.5));
/// \endcode
inline Scale scale(double factor) { return Scale(factor); }

/// A `ClipNorm` hook: Python's `clip_grad_norm_` on the hook's gradients.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_hook(net, modhooks::grad::clip_norm(1.0));
/// \endcode
inline ClipNorm clip_norm(double max_norm) { return ClipNorm(max_norm); }

/// A `CheckFinite` hook.
///
/// **Example**:
/// \code
///   auto h = modhooks::register_full_backward_pre_hook(net, modhooks::grad::check_finite());
/// \endcode
inline CheckFinite check_finite() { return CheckFinite(); }

/// @}

}  // namespace grad
MODHOOKS_END_NAMESPACE
