// SPDX-License-Identifier: BSD-3-Clause
// A user of the modhooks package: one forward hook through the umbrella header.
#include <modhooks/modhooks.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>

int main() {
  torch::nn::Linear linear(2, 2);
  int calls = 0;
  modhooks::ScopedHandle h(modhooks::register_forward_hook(
      linear,
      [&](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) { ++calls; }));
  modhooks::call(linear, at::randn({1, 2}));
  std::printf("modhooks %d.%d.%d: forward hook called %d time(s)\n", MODHOOKS_VERSION_MAJOR,
              MODHOOKS_VERSION_MINOR, MODHOOKS_VERSION_PATCH, calls);
  return calls == 1 ? 0 : 1;
}
