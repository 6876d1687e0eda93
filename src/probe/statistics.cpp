// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "statistics.h"

#include <ATen/ATen.h>
#include <torch/csrc/api/include/torch/version.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {
namespace {

/// Four floats at a time: 16 bytes, a vector register on every target (wider vectors would be
/// emulated where the library is built without AVX).
using Lanes = float __attribute__((vector_size(16)));
using LaneMask = int __attribute__((vector_size(16)));
constexpr int64_t kWidth = sizeof(Lanes) / sizeof(float);
constexpr int64_t kChains = 4;  // independent accumulators, so that each vector op need not wait

/// The largest and the smallest of `n` floats, both NaN where one is NaN, as `torch.aminmax`
/// gives them, in one read in vector lanes: ATen's aminmax reads a float tensor at half the
/// speed of its sum, and a float CPU tensor is the dump's common case. Max and min do not depend
/// on the order they are taken in, with one exception ATen shares: where the largest (or the
/// smallest) value is a zero held with both signs, which sign shows depends on the lanes.
std::pair<float, float> float_extremes(const float* data, int64_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::array<Lanes, kChains> high{}, low{};
  for (int64_t k = 0; k < kChains; ++k) {
    for (int64_t j = 0; j < kWidth; ++j) {
      high[k][j] = -inf;
      low[k][j] = inf;
    }
  }
  LaneMask nan{};
  int64_t i = 0;
  for (; i + kChains * kWidth <= n; i += kChains * kWidth) {
    for (int64_t k = 0; k < kChains; ++k) {
      Lanes x;
      std::memcpy(&x, data + i + k * kWidth, sizeof x);  // unaligned
      high[k] = x > high[k] ? x : high[k];  // a NaN compares false: kept out of these...
      low[k] = x < low[k] ? x : low[k];
      nan |= x != x;  // NOLINT(misc-redundant-expression): ...and noted here, NaN alone unequal
    }
  }
  float top = -inf, bottom = inf;
  bool any_nan = false;
  for (int64_t k = 0; k < kChains; ++k) {
    for (int64_t j = 0; j < kWidth; ++j) {
      top = high[k][j] > top ? high[k][j] : top;
      bottom = low[k][j] < bottom ? low[k][j] : bottom;
      any_nan = any_nan || nan[j] != 0;
    }
  }
  for (; i < n; ++i) {
    top = data[i] > top ? data[i] : top;
    bottom = data[i] < bottom ? data[i] : bottom;
    any_nan = any_nan || std::isnan(data[i]);
  }
  if (any_nan)
    return {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  return {top, bottom};
}

/// A float CPU tensor's four, as torch gives them: the extremes above, `torch.mean` as its CPU
/// kernel takes it (the float sum divided by the element count in float), and
/// `linalg_vector_norm`, which is `torch.norm`'s two-norm without its wrapper's copies.
std::array<double, 4> float_cpu_statistics(const at::Tensor& tensor) {
  const auto [top, bottom] = float_extremes(tensor.data_ptr<float>(), tensor.numel());
  const float sum = at::sum(tensor).item<float>();
  const float norm = at::linalg_vector_norm(tensor).item<float>();
  return {top, bottom, sum / static_cast<float>(tensor.numel()), norm};
}

/// Max and min on the tensor's device, in one pass (`aminmax`) where libtorch has it for the
/// dtype: libtorch 1.13's CPU kernel lacks Half, whose max and min are then taken apart.
std::pair<at::Tensor, at::Tensor> device_extremes(const at::Tensor& tensor) {
#if TORCH_VERSION_MAJOR < 2
  if (tensor.is_cpu() && tensor.scalar_type() == at::kHalf) return {tensor.max(), tensor.min()};
#endif
  auto [lowest, highest] = at::aminmax(tensor);
  return {highest, lowest};
}

}  // namespace

void add_statistics(const at::Tensor& tensor, Json& record) {
  Json max, min, mean, norm;  // null unless set
  const c10::ScalarType type = tensor.scalar_type();
  const bool low_float = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  if (tensor.numel() == 0 || at::isComplexType(type)) {
    // msprobe leaves all four None
  } else if (tensor.dim() == 0 && (low_float || type == at::kDouble)) {
    const double v = tensor.to(at::kDouble).item<double>();
    max = min = mean = norm = v;
  } else if (type == at::kFloat && tensor.is_cpu() && tensor.is_contiguous() && !tensor.is_neg()) {
    const std::array<double, 4> four = float_cpu_statistics(tensor);
    max = four[0];
    min = four[1];
    mean = four[2];
    norm = four[3];
  } else if (low_float) {
    // On the tensor's device, stacked so that one small copy reaches the host.
    const auto [highest, lowest] = device_extremes(tensor);
    const at::Tensor four =
        at::stack({highest, lowest, tensor.mean(), tensor.norm()}).to(at::kDouble).cpu();
    const double* v = four.data_ptr<double>();
    max = v[0];
    min = v[1];
    mean = v[2];
    norm = v[3];
  } else if (type == at::kDouble) {
    const at::Tensor two = at::stack({tensor.max(), tensor.min()}).cpu();
    max = two[0].item<double>();
    min = two[1].item<double>();
  } else if (type == at::kBool) {
    const at::Tensor two = at::stack({tensor.any(), tensor.all()}).cpu();
    max = two[0].item<bool>();
    min = two[1].item<bool>();
  } else {
    const at::Tensor two = at::stack({tensor.max(), tensor.min()}).to(at::kLong).cpu();
    max = two[0].item<int64_t>();
    min = two[1].item<int64_t>();
  }
  record["Max"] = max;
  record["Min"] = min;
  record["Mean"] = mean;
  record["Norm"] = norm;
}

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
