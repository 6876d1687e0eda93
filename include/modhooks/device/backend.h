// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
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

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device {

/// \addtogroup api_device
/// @{

/// The gradient operations of one kind of device, as `backend_for` returns them: ATen's for CPU,
/// CUDA and every other ATen device, ACL's for an Ascend NPU. None writes into its arguments.
///
/// **Example**:
/// \code
///   const modhooks::device::Backend& backend = modhooks::device::backend_for(t.device());
///   at::Tensor doubled = backend.mul(t, 2.0);
/// \endcode
class Backend {
 public:
  virtual ~Backend() = default;

  /// "aten" or "npu". \see \ref api_device
  virtual const char* name() const = 0;
  /// A new tensor shaped like `t`, every byte zero. \see \ref api_device
  virtual at::Tensor zeros_like(const at::Tensor& t) const = 0;
  /// A new tensor equal to t * factor. \see \ref api_device
  virtual at::Tensor mul(const at::Tensor& t, double factor) const = 0;
  /// The 2-norm of all elements of `tensors` taken together; each is defined and on a device
  /// this backend serves. \see \ref api_device
  virtual double norm(c10::ArrayRef<at::Tensor> tensors) const = 0;
  /// Position in `tensors` of the first one holding NaN or Inf. \see \ref api_device
  virtual std::optional<std::size_t> first_non_finite(c10::ArrayRef<at::Tensor> tensors) const = 0;
};

/// Whether `device` is an Ascend NPU (libtorch 2.x only: 1.13 has no named PrivateUse1 device,
/// and torch_npu for it used another slot).
///
/// **Example**:
/// \code
///   bool npu = modhooks::device::is_npu(grad.device());
/// \endcode
bool is_npu(const c10::Device& device);

/// The backend serving tensors on `device`.
///
/// **Example**:
/// \code
///   double norm = modhooks::device::backend_for(t.device()).norm({t});
/// \endcode
const Backend& backend_for(const c10::Device& device);

/// @}

}  // namespace device
MODHOOKS_END_NAMESPACE
