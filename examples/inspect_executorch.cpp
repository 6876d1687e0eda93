// SPDX-License-Identifier: BSD-3-Clause
// Hooks inside an ExecuTorch program: Python exported torchvision's resnet18 with
// modhooks.export(backend="executorch") (a hook point on each BasicBlock), lowered it with the
// XNNPACK partitioner and wrote the .pte (inspect_executorch.py); here ExecuTorch's C++ runtime
// runs it, per-point hooks collect activation statistics of the inner blocks as the program
// runs, one hook rewrites a block's output, and both are checked against Python's eager hooks.
//
//   python examples/inspect_executorch.py out/ && ./inspect_executorch out/
#include <modhooks/executorch.h>

#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  modhooks::executorch::Program net(dir + "/resnet18.pte");
  modhooks::StateDict expected = modhooks::load(dir + "/resnet18_expected.pt");
  const at::Tensor x = expected.at("input");

  // 1. Statistics computed inside the hooks: nothing of the program's memory is kept.
  std::map<std::string, std::pair<double, double>> stats;  // name -> (mean, std)
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name), [&](const modhooks::executorch::Point& p, const std::vector<c10::IValue>&,
                             const c10::IValue& output) {
          const at::Tensor& t = output.toTensor();
          stats[p.name()] = {t.mean().item<double>(), t.std().item<double>()};
        }));
  }
  const at::Tensor logits = net.run({x})[0];
  for (auto& h : handles) h.remove();

  bool ok = true;
  auto close = [&](const std::string& what, double got, const at::Tensor& want) {
    const double diff = std::abs(got - want.item<double>());
    ok = ok && diff < 1e-4;
    if (diff >= 1e-4) std::cout << "  " << what << " DIFFERS by " << diff << "\n";
  };
  for (const auto& [name, s] : stats) {
    std::cout << name << " (" << net.point(name).type_name() << "): mean " << s.first << ", std "
              << s.second << "\n";
    close(name + " mean", s.first, expected.at(name + ".mean"));
    close(name + " std", s.second, expected.at(name + ".std"));
  }
  ok = ok && stats.size() == net.points().size();
  ok = ok && at::allclose(logits, expected.at("logits"), 1e-4, 1e-4);

  // 2. Rewrite one block's output: halve layer3.0; what follows computes with it.
  auto halve = modhooks::register_forward_hook(
      net.point("layer3.0"), [](const modhooks::executorch::Point&, const std::vector<c10::IValue>&,
                                const c10::IValue& output) { return output.toTensor() * 0.5; });
  ok = ok && at::allclose(net.run({x})[0], expected.at("logits_halved"), 1e-4, 1e-4);
  halve.remove();

  std::cout << (ok ? "C++ hooks inside the ExecuTorch program match Python's eager hooks\n"
                   : "MISMATCH with Python's eager hooks\n");
  return ok ? 0 : 1;
}
