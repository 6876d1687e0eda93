// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/InferenceMode.h>

#include "modhooks/version.h"

// What a load's copies and swaps check before the first write, and the swap itself.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// `assign`'s swap: the tensor object stays (a module's member and its registry entry are one
/// object, and optimizers may hold it), its data becomes `source`'s. `set_data` refuses to move
/// a tensor between the meta device and a real one, which is how a meta-initialised model is
/// materialised; there the metadata is copied as `set_data` copies it after that check.
inline void swap_in(const at::Tensor& target, const at::Tensor& source) {
  if (target.is_meta() != source.is_meta()) {
    target.unsafeGetTensorImpl()->shallow_copy_from(source.getIntrusivePtr());
  } else {
    target.set_data(source);
  }
}

/// What makes a load's copy (`copy_`) or swap (`assign`) fail, checked without writing into the
/// model: each check throws what the copy or swap itself would (libtorch's own checks, run on the
/// tensors or on a stand-in), so that a load that fails here fails with Python's message and
/// nothing written. What is left to fail once these pass is the device or the file under the
/// copy (an error of the CUDA runtime, memory the device cannot give, a read error).
class CopyChecks {
 public:
  /// `target.copy_(source)`, whose shapes are equal.
  void copy(const at::Tensor& target, const at::Tensor& source) {
    if (target.is_meta()) return;  // a no-op, with Python's warning
    TORCH_CHECK_NOT_IMPLEMENTED(!source.is_meta(), "Cannot copy out of meta tensor; no data!");
    if (source.layout() != at::kStrided || target.layout() != at::kStrided ||
        source.is_quantized() || target.is_quantized()) {
      // copy_'s rules between layouts and for quantized tensors are its own: a trial copy into a
      // tensor like the target (at most one tensor's size, freed at once) gives its answer.
      at::empty_like(target).copy_(source);
      return;
    }
    // An `expand`ed target, or one of whose elements share memory; a source that overlaps part
    // of the target (copy_'s TensorIterator refuses both, with these messages).
    at::assert_no_internal_overlap(target);
    at::assert_no_partial_overlap(target, source);
    if (target.is_inference() && !c10::InferenceMode::is_enabled()) {
      target.as_strided({0}, {1}).copy_(at::empty({0}, target.options()));  // fails as copy_ does
    }
    if (source.scalar_type() != target.scalar_type() || source.device() != target.device()) {
      // A conversion or transfer libtorch lacks (an old libtorch's float8 to complex) fails on
      // one element, once per pair of dtypes and devices, rather than halfway through the model.
      const Pair pair{source.scalar_type(), target.scalar_type(), source.device(), target.device()};
      if (source.numel() != 0 && std::find(tried_.begin(), tried_.end(), pair) == tried_.end()) {
        at::empty({1}, target.options()).copy_(source.as_strided({1}, {1}));
        tried_.push_back(pair);
      }
    }
  }

  /// `swap_in(target, source)`, run on a stand-in with the target's options and `requires_grad`
  /// (set_data's checks: the kinds of tensor, a floating-point dtype where gradients are
  /// required); it shares the source's storage, so it copies nothing.
  static void swap(const at::Tensor& target, const at::Tensor& source) {
    at::Tensor stand_in = at::empty({0}, target.options());
    if (target.requires_grad()) stand_in.requires_grad_(true);
    swap_in(stand_in, source);
  }

 private:
  struct Pair {
    at::ScalarType from, to;
    at::Device from_device, to_device;
    bool operator==(const Pair& o) const {
      return from == o.from && to == o.to && from_device == o.from_device &&
             to_device == o.to_device;
    }
  };
  std::vector<Pair> tried_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
