// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The device layer under modhooks::grad: the few gradient operations a hook needs, done on
/// each tensor's own device. CPU, CUDA and every other ATen device go through ATen ops on the
/// tensor's device; an Ascend NPU (libtorch's PrivateUse1 device named "npu", as torch_npu
/// registers it) goes through ACL, loaded at run time (see acl_library.h).
///
/// Every operation returns new tensors and never writes into its arguments: autograd hands a
/// hook gradients that may alias buffers it still needs (another branch's grad, an accumulated
/// .grad), and PyTorch's hook contract is "return a replacement, do not modify in place".

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <optional>

namespace modhooks::device {

class Backend {
 public:
  virtual ~Backend() = default;

  /// "aten" or "npu".
  virtual const char* name() const = 0;
  /// A new tensor shaped like `t`, every byte zero.
  virtual at::Tensor zeros_like(const at::Tensor& t) const = 0;
  /// A new tensor equal to t * factor.
  virtual at::Tensor mul(const at::Tensor& t, double factor) const = 0;
  /// The 2-norm of all elements of `tensors` taken together; each is defined and on a device
  /// this backend serves.
  virtual double norm(c10::ArrayRef<at::Tensor> tensors) const = 0;
  /// Position in `tensors` of the first one holding NaN or Inf.
  virtual std::optional<std::size_t> first_non_finite(c10::ArrayRef<at::Tensor> tensors) const = 0;
};

/// Whether `device` is an Ascend NPU (libtorch 2.x only: 1.13 has no named PrivateUse1 device,
/// and torch_npu for it used another slot).
bool is_npu(const c10::Device& device);

/// The backend serving tensors on `device`.
const Backend& backend_for(const c10::Device& device);

}  // namespace modhooks::device
