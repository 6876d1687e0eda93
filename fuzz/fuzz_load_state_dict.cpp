// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// load_state_dict over state dicts drawn from the input: the model's keys and junk, right and
// wrong shapes, every dtype a checkpoint holds, undefined tensors, the model's own tensors as
// values, strict or not, copy or assign. It checks the promise of all-or-nothing: a load that
// raises leaves every parameter and buffer bit-identical, and one that returns copied the values.
#include <ATen/ops/empty.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "modhooks/core/error.h"
#include "modhooks/state/module_state.h"

namespace {

using modhooks_fuzz::identical;
using modhooks_fuzz::violated;

/// Fresh per input, so an earlier assign cannot leak into the next run; values fixed so a
/// finding replays the same.
torch::nn::Sequential make_model() {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  at::NoGradGuard no_grad;
  double next = 0.25;
  for (auto& item : model->named_parameters()) item.value().fill_((next += 0.5));
  for (auto& item : model->named_buffers()) item.value().fill_((next += 0.5));
  return model;
}

/// The dtypes checkpoints hold, minus complex: copying complex into a real parameter is legal
/// but warns on every run.
constexpr c10::ScalarType kDtypes[] = {
    c10::kFloat,  c10::kDouble, c10::kHalf,   c10::kBFloat16,      c10::kChar,
    c10::kShort,  c10::kInt,    c10::kLong,   c10::kByte,          c10::kBool,
    c10::kUInt16, c10::kUInt32, c10::kUInt64, c10::kFloat8_e4m3fn, c10::kFloat8_e5m2};

/// A tensor of `sizes` and a drawn dtype whose bytes come from the input.
at::Tensor draw_values(FuzzedDataProvider& in, std::vector<std::int64_t> sizes) {
  const c10::ScalarType dtype = in.PickValueInArray(kDtypes);
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
  std::vector<std::uint8_t> bytes = in.ConsumeBytes<std::uint8_t>(t.nbytes());
  bytes.resize(t.nbytes());
  if (dtype == c10::kBool) {
    for (auto& b : bytes) b &= 1;  // any other byte is not a bool
  }
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::vector<std::int64_t> draw_sizes(FuzzedDataProvider& in) {
  std::vector<std::int64_t> sizes(in.ConsumeIntegralInRange(0, 3));
  for (auto& s : sizes) s = in.ConsumeIntegralInRange(0, 5);
  return sizes;
}

struct Drawn {
  modhooks::StateDict sd;
  bool aliases_model = false;  // a value shares memory with the model: copies may chain
};

Drawn draw_state_dict(FuzzedDataProvider& in, const modhooks::StateDict& model_state) {
  Drawn out;
  const int n = in.ConsumeIntegralInRange(0, 12);
  for (int i = 0; i < n && in.remaining_bytes() > 0; ++i) {
    const auto& [model_key, model_tensor] = *std::next(
        model_state.begin(), in.ConsumeIntegralInRange<std::size_t>(0, model_state.size() - 1));
    std::string key = model_key;
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:
        key = in.ConsumeRandomLengthString(16);
        break;
      case 1:
        key += in.ConsumeRandomLengthString(4);
        break;
      default:
        break;
    }
    at::Tensor value;
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0:
        value = draw_values(in, draw_sizes(in));
        break;
      case 1:
        break;  // undefined
      case 2: {
        const auto& other = *std::next(
            model_state.begin(), in.ConsumeIntegralInRange<std::size_t>(0, model_state.size() - 1));
        value = other.second.dim() == 2 && in.ConsumeBool() ? other.second.t() : other.second;
        out.aliases_model = true;
        break;
      }
      default:
        value = draw_values(in, model_tensor.sizes().vec());
        break;
    }
    out.sd.insert_or_assign(key, value);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const bool strict = in.ConsumeBool();
  const bool assign = in.ConsumeBool();
  torch::nn::Sequential model = make_model();
  const modhooks::StateDict live = modhooks::state_dict(model, "", /*keep_vars=*/true);
  std::vector<std::pair<std::string, at::Tensor>> before;
  for (const auto& [key, tensor] : live) before.emplace_back(key, tensor.detach().clone());
  const Drawn drawn = draw_state_dict(in, live);
  // Values as they were before the load: a strict success must have copied exactly these.
  modhooks::StateDict expected;
  for (const auto& [key, tensor] : drawn.sd) {
    expected.insert_or_assign(key, tensor.defined() ? tensor.detach().clone() : tensor);
  }

  modhooks::IncompatibleKeys result;
  try {
    result = modhooks::load_state_dict(model, drawn.sd, strict, assign);
  } catch (const modhooks::Error&) {
    for (const auto& [key, former] : before) {
      if (!identical(live.at(key), former)) violated("a failed load changed '" + key + "'");
    }
    return 0;
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    violated("a strict load returned incompatible keys");
  }
  if (drawn.aliases_model) return 0;
  for (const auto& [key, former] : before) {
    if (!expected.contains(key)) continue;
    at::Tensor source = expected.at(key);
    // Python's backward compatibility: a 0-dim parameter loads from a 1-element 1-dim entry.
    if (former.dim() == 0 && source.dim() == 1 && source.size(0) == 1) source = source[0];
    at::Tensor want = source;
    if (!assign) {
      want = at::empty_like(former);
      want.copy_(source);
    }
    if (!identical(live.at(key).detach(), want)) violated("a load did not copy '" + key + "'");
  }
  return 0;
}
