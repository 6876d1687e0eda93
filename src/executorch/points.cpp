// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <exception>
#include <utility>

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

bool fire_point(std::string_view name, bool inputs, const TensorView* outs,
                std::size_t n) noexcept {
  using EtPoints = Points<EtProgram>;
  const c10::string_view point(name.data(), name.size());
  if (EtPoints::idle(point)) return true;
  try {
    c10::SmallVector<at::Tensor, 4> tensors;
    for (std::size_t i = 0; i < n; ++i) {
      tensors.push_back(at::from_blob(
          outs[i].data, at::IntArrayRef(outs[i].sizes.data(), outs[i].dim),
          at::TensorOptions().dtype(static_cast<at::ScalarType>(outs[i].dtype))));
    }
    if (inputs) {
      EtPoints::fire_input(point, tensors);
    } else {
      EtPoints::fire_output(point, tensors);
    }
    return true;
  } catch (...) {
    EtPoints::record_error(std::current_exception());
    return false;
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
