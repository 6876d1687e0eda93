// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Seeds written by modhooks itself, beside Python's (make_corpus.py): modhooks' writer lays out
// its zip and pickle its own way, and the readers must take both.
//
//     make_seeds OUT   ->  OUT/torch_save/modhooks_*.pt, OUT/safetensors/modhooks_*.safetensors
#include <ATen/ops/arange.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <string>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/state/module_state.h"

namespace {

void save_both(const modhooks::StateDict& sd, const std::string& out, const std::string& name,
               bool safetensors) {
  modhooks::save(sd, out + "/torch_save/modhooks_" + name + ".pt");
  if (safetensors) modhooks::save(sd, out + "/safetensors/modhooks_" + name + ".safetensors");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT (with OUT/torch_save and OUT/safetensors)\n");
    return 2;
  }
  const std::string out = argv[1];
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  save_both(modhooks::state_dict(model), out, "sequential", true);

  modhooks::StateDict dtypes;
  const at::Tensor values = at::arange(6, at::kDouble).reshape({2, 3}) - 2.5;
  for (c10::ScalarType dtype :
       {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16, c10::kChar, c10::kShort, c10::kInt,
        c10::kLong, c10::kByte, c10::kBool, c10::kComplexFloat, c10::kUInt16, c10::kUInt32,
        c10::kUInt64, c10::kFloat8_e4m3fn, c10::kFloat8_e5m2}) {
    dtypes.insert_or_assign(c10::toString(dtype), values.to(dtype));
  }
  save_both(dtypes, out, "dtypes", true);
  // torch.save only: safetensors has no complex128, and views are written contiguous.
  modhooks::StateDict views;
  views.insert_or_assign("complex128", values.to(c10::kComplexDouble));
  views.insert_or_assign("transposed", values.t());
  views.insert_or_assign("scalar", values[1][2]);
  views.metadata().insert_or_assign("", modhooks::Metadata{{"version", 1}});
  save_both(views, out, "views", false);
  return 0;
}
