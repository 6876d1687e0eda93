// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/device/grad.h"

#include <algorithm>
#include <cmath>

#include "modhooks/core/error.h"
#include "modhooks/device/backend.h"

MODHOOKS_BEGIN_NAMESPACE
namespace grad::detail {
namespace {

/// The defined tensors of `grads` grouped by device (first-seen order), with their positions:
/// reductions run per device, where the data lives.
struct DeviceGroup {
  c10::Device device;
  std::vector<at::Tensor> tensors;
  std::vector<std::size_t> positions;
};

std::vector<DeviceGroup> by_device(const TensorList& grads) {
  std::vector<DeviceGroup> groups;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i];
    if (!g.defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const DeviceGroup& group) { return group.device == g.device(); });
    if (it == groups.end()) it = groups.insert(groups.end(), DeviceGroup{g.device(), {}, {}});
    it->tensors.push_back(g);
    it->positions.push_back(i);
  }
  return groups;
}

}  // namespace

TensorList zeros(const TensorList& grads) {
  TensorList out;
  out.reserve(grads.size());
  for (const auto& g : grads) {
    out.push_back(g.defined() ? device::backend_for(g.device()).zeros_like(g) : g);
  }
  return out;
}

TensorList scaled(const TensorList& grads, double factor) {
  TensorList out;
  out.reserve(grads.size());
  for (const auto& g : grads) {
    out.push_back(g.defined() ? device::backend_for(g.device()).mul(g, factor) : g);
  }
  return out;
}

double total_norm(const TensorList& grads) {
  double sum_of_squares = 0;
  for (const auto& group : by_device(grads)) {
    double n = device::backend_for(group.device).norm(group.tensors);
    sum_of_squares += n * n;
  }
  return std::sqrt(sum_of_squares);
}

std::optional<TensorList> clipped(const TensorList& grads, double max_norm) {
  const double norm = total_norm(grads);
  if (!(norm > max_norm)) return std::nullopt;
  return scaled(grads, max_norm / (norm + 1e-6));
}

std::optional<std::size_t> first_non_finite(const TensorList& grads) {
  std::optional<std::size_t> first;
  for (const auto& group : by_device(grads)) {
    if (auto i = device::backend_for(group.device).first_non_finite(group.tensors)) {
      std::size_t position = group.positions[*i];
      if (!first || position < *first) first = position;
    }
  }
  return first;
}

void fail_non_finite(const char* list_name, std::size_t index, const std::string& module) {
  modhooks::detail::fail<RuntimeError>(
      "device.grad.non_finite", "modhooks: grad::check_finite: " + std::string(list_name) + "[" +
                                    std::to_string(index) + "] of module '" + module +
                                    "' holds NaN or Inf");
}

}  // namespace grad::detail
MODHOOKS_END_NAMESPACE
