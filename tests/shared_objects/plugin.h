// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// What each of the two plugins of shared_objects_test.cpp exports. plugin.cpp is built twice, as
// libmodhooks_plugin_a.so (namespace plugin_a) and libmodhooks_plugin_b.so (plugin_b), with
// hidden visibility, as Python extension modules are: whatever state modhooks' headers defined
// would exist once per plugin.
#pragma once

#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "modhooks/core/handle.h"

#define MODHOOKS_PLUGIN_API __attribute__((visibility("default")))

#define MODHOOKS_PLUGIN_DECLARE(ns)                                                         \
  namespace ns {                                                                            \
  MODHOOKS_PLUGIN_API torch::nn::Linear make_linear();                                      \
  MODHOOKS_PLUGIN_API at::Tensor run(torch::nn::Linear& linear, const at::Tensor& input);   \
  MODHOOKS_PLUGIN_API modhooks::RemovableHandle add_forward_hook(torch::nn::Linear& linear, \
                                                                 int* calls);               \
  MODHOOKS_PLUGIN_API modhooks::RemovableHandle add_global_forward_hook(int* calls);        \
  }

MODHOOKS_PLUGIN_DECLARE(plugin_a)
MODHOOKS_PLUGIN_DECLARE(plugin_b)
