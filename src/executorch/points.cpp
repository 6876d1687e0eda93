// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>
#include <c10/util/accumulate.h>

#include <cstddef>
#include <exception>
#include <utility>
#include <vector>

#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/points/detail/firing.h"
#include "program.h"
#include "runtime.h"

// The points of ExecuTorch programs: their hook tables, and the firing that the point kernel
// (runtime.cpp) calls.

// The global tables of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooksActive<const modhooks::executorch::Point>;
template const std::shared_ptr<modhooks::detail::ModuleHooks<const modhooks::executorch::Point>>&
modhooks::detail::global_hooks<const modhooks::executorch::Point>();

MODHOOKS_BEGIN_NAMESPACE

namespace executorch {

Point::Point(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
    : PointInfo(std::move(name), std::move(type_name), inputs, single, index),
      hooks_(std::make_shared<modhooks::detail::ExecutorchPointHooks>()) {}

}  // namespace executorch

namespace detail {

const std::shared_ptr<ExecutorchPointHooks>& hooks_for(const executorch::Point& point) noexcept {
  return point.hooks_;
}

namespace {

/// The tensors over the program's memory at the firings under way on this thread, which the
/// firing copies kept tensors from and writes replacements into: made once and pointed at each
/// firing's memory, since making a tensor is a large part of what a firing costs. A firing takes
/// the slots after those of the firings it runs inside (a hook may run another program).
thread_local std::vector<at::Tensor> target_slots;
thread_local std::size_t targets_in_use = 0;

/// Slots `first`..`first + n` pointed at `views`: their tensors, held by the caller, since a
/// nested firing may grow (move) the slots.
c10::SmallVector<at::Tensor, 4> point_targets(std::size_t first, const TensorView* views,
                                              std::size_t n) {
  if (target_slots.size() < first + n) target_slots.resize(first + n);
  for (std::size_t i = 0; i < n; ++i) {
    const TensorView& v = views[i];
    const auto dtype = static_cast<at::ScalarType>(v.dtype);
    at::Tensor& t = target_slots[first + i];
    if (!t.defined() || t.scalar_type() != dtype) t = at::empty({0}, at::dtype(dtype));
    const at::IntArrayRef sizes(v.sizes.data(), v.dim);
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    impl->storage().unsafeGetStorageImpl()->UniqueStorageShareExternalPointer(
        c10::DataPtr(v.data, c10::Device(c10::kCPU)),
        static_cast<std::size_t>(c10::multiply_integers(sizes)) * t.element_size());
    if (impl->sizes() != sizes) impl->set_sizes_contiguous(sizes);
  }
  return c10::SmallVector<at::Tensor, 4>(
      target_slots.begin() + static_cast<std::ptrdiff_t>(first),
      target_slots.begin() + static_cast<std::ptrdiff_t>(first + n));
}

}  // namespace

bool fire_point(std::string_view name, bool inputs, const TensorView* outs,
                std::size_t n) noexcept {
  using EtPoints = Points<EtProgram>;
  const executorch::Point* point = EtPoints::firing(c10::string_view(name.data(), name.size()));
  if (!point) return true;
  const std::size_t first = targets_in_use;
  try {
    const c10::SmallVector<at::Tensor, 4> targets = point_targets(first, outs, n);
    targets_in_use = first + n;
    if (inputs) {
      EtPoints::fire_input(*point, targets);
    } else {
      EtPoints::fire_output(*point, targets);
    }
    targets_in_use = first;
    return true;
  } catch (...) {
    targets_in_use = first;
    EtPoints::record_error(std::current_exception());
    return false;
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
