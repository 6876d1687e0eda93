// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// Two shared objects linked against a shared libmodhooks see one registry: hooks that one
// registers on the other's modules fire wherever the module runs, hook ids never repeat, and
// global hooks reach both. Built only where modhooks is a shared library (BUILD_SHARED_LIBS).
#include <gtest/gtest.h>

#include "shared_objects/plugin.h"

namespace {

TEST(SharedObjects, AHookOneRegistersFiresWhenTheOtherRunsTheModule) {
  torch::nn::Linear linear = plugin_b::make_linear();
  int calls = 0;
  modhooks::RemovableHandle handle = plugin_a::add_forward_hook(linear, &calls);
  plugin_b::run(linear, torch::ones({1, 2}));
  plugin_a::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 2);
  handle.remove();
  plugin_b::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 2);
}

TEST(SharedObjects, HookIdsNeverRepeatAcrossThem) {
  torch::nn::Linear linear = plugin_a::make_linear();
  int calls = 0;
  modhooks::RemovableHandle a = plugin_a::add_forward_hook(linear, &calls);
  modhooks::RemovableHandle b = plugin_b::add_forward_hook(linear, &calls);
  EXPECT_NE(a.id(), b.id());
  plugin_a::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 2);
  b.remove();  // removes b's hook only
  plugin_b::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 3);
  a.remove();
}

TEST(SharedObjects, AGlobalHookOneRegistersRunsForTheOthersModules) {
  torch::nn::Linear linear = plugin_a::make_linear();
  int calls = 0;
  modhooks::RemovableHandle handle = plugin_b::add_global_forward_hook(&calls);
  plugin_a::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 1);
  handle.remove();
  plugin_a::run(linear, torch::ones({1, 2}));
  EXPECT_EQ(calls, 1);
}

}  // namespace
