// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "plugin.h"

#include <modhooks/modhooks.h>

namespace MODHOOKS_PLUGIN {

torch::nn::Linear make_linear() { return torch::nn::Linear(2, 2); }

at::Tensor run(torch::nn::Linear& linear, const at::Tensor& input) {
  return modhooks::call(linear, input);  // modhooks' inline fast path, compiled into this plugin
}

modhooks::RemovableHandle add_forward_hook(torch::nn::Linear& linear, int* calls) {
  return modhooks::register_forward_hook(
      linear, [calls](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) {
        ++*calls;
      });
}

modhooks::RemovableHandle add_global_forward_hook(int* calls) {
  return modhooks::register_module_forward_hook([calls](torch::nn::Module&,
                                                        const std::vector<c10::IValue>&,
                                                        const c10::IValue&) { ++*calls; });
}

}  // namespace MODHOOKS_PLUGIN
