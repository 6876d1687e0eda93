// SPDX-License-Identifier: BSD-3-Clause
// Hooks inside an exported model: Python exported torchvision's resnet18 with modhooks.export
// (a hook point on each BasicBlock) and compiled it with AOTInductor (inspect_exported.py);
// here C++ loads the package, collects activation statistics of the inner blocks, rewrites one
// block's output, and checks both against what Python's eager hooks saw on the same weights.
//
//   python examples/inspect_exported.py out/ && ./inspect_exported out/
#include <modhooks/aoti.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  modhooks::aoti::Model net(dir + "/resnet18.pt2");
  modhooks::StateDict expected = modhooks::load(dir + "/resnet18_expected.pt");
  const at::Tensor x = expected.at("input");
  std::cout << "resnet18.pt2: " << net.points().size() << " points:";
  for (const auto& name : net.points()) std::cout << " " << name;
  std::cout << "\n";

  // 1. Every block's output, kept as Python code keeps activations: what a hook is given stays
  //    valid after it returns, although the compiled model reuses its buffers.
  std::map<std::string, at::Tensor> acts;
  auto keep = modhooks::register_module_forward_hook(
      [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&,
          const c10::IValue& output) { acts[p.name()] = output.toTensor(); });
  at::Tensor logits = net.run({x})[0];
  keep.remove();

  bool ok = true;
  auto check = [&](const std::string& what, const at::Tensor& got, const at::Tensor& want) {
    const double diff = (got - want).abs().max().item<double>();
    const bool close = diff < 1e-4;
    ok = ok && close;
    std::cout << "  " << what << (close ? " matches" : " DIFFERS") << " (max diff " << diff
              << ")\n";
  };
  for (const auto& name : net.points()) {
    std::cout << name << " (" << net.point(name).type_name() << "): mean "
              << acts.at(name).mean().item<float>() << ", std " << acts.at(name).std().item<float>()
              << "\n";
    check(name + " mean", acts.at(name).mean(), expected.at(name + ".mean"));
    check(name + " std", acts.at(name).std(), expected.at(name + ".std"));
  }
  check("logits", logits, expected.at("logits"));

  // 2. Rewrite one block's output: halve layer3.0; what follows computes with it.
  auto halve = modhooks::register_forward_hook(
      net.point("layer3.0"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                                const c10::IValue& output) { return output.toTensor() * 0.5; });
  check("logits with layer3.0 halved", net.run({x})[0], expected.at("logits_halved"));
  halve.remove();

  std::cout << (ok ? "C++ hooks inside the compiled model match Python's eager hooks\n"
                   : "MISMATCH with Python's eager hooks\n");
  return ok ? 0 : 1;
}
