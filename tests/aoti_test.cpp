// SPDX-License-Identifier: BSD-3-Clause
// modhooks/aoti.h: hooks inside AOTInductor packages exported by modhooks.export, against
// Python eager's hooks on the same weights (tests/python/aoti_packages.py writes both).
#include "modhooks/aoti.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

/// The fixture's folder: MODHOOKS_AOTI_PACKAGES in the environment (the GPU machine's check
/// writes its CUDA package elsewhere), else the one the build names.
std::string package(const std::string& name) {
  const char* dir = std::getenv("MODHOOKS_AOTI_PACKAGES");
  return std::string(dir ? dir : MODHOOKS_AOTI_PACKAGES) + "/" + name;
}

/// One case of the fixture: its package, its point table and eager's record.
struct Case {
  explicit Case(const std::string& name)
      : path(package(name + ".pt2")),
        record(modhooks::load(package(name + ".safetensors"))),
        device(name.size() > 5 && name.substr(name.size() - 5) == "_cuda" ? c10::Device("cuda")
                                                                          : c10::Device("cpu")) {
    std::ifstream in(package(name + ".json"));
    info = nlohmann::json::parse(in);
  }
  std::vector<at::Tensor> inputs(int run = 0) const {
    std::vector<at::Tensor> xs;
    for (int i = 0; i < info["runs"][run]["inputs"].get<int>(); ++i) {
      xs.push_back(record.at(prefix(run) + "input." + std::to_string(i)).to(device));
    }
    return xs;
  }
  std::vector<std::string> order(int run = 0, const char* key = "order") const {
    return info["runs"][run][key].get<std::vector<std::string>>();
  }
  /// Eager's tensors of firing `n` (`what`: "fire" for forward hooks, "pre" for pre-hooks).
  std::vector<at::Tensor> fired(int n, int run = 0, const char* what = "fire") const {
    std::vector<at::Tensor> ts;
    for (int k = 0;; ++k) {
      const std::string key =
          prefix(run) + what + "." + std::to_string(n) + "." + std::to_string(k);
      if (!record.contains(key)) return ts;
      ts.push_back(record.at(key));
    }
  }
  std::vector<at::Tensor> outputs(const char* what = "output", int run = 0) const {
    std::vector<at::Tensor> ts;
    for (int j = 0; j < info["runs"][run]["outputs"].get<int>(); ++j) {
      ts.push_back(record.at(prefix(run) + what + "." + std::to_string(j)));
    }
    return ts;
  }
  static std::string prefix(int run) { return run == 0 ? "" : "run" + std::to_string(run) + "."; }

  std::string path;
  modhooks::StateDict record;
  c10::Device device;  // where the package runs: inputs go there, the record stays on the CPU
  nlohmann::json info;
};

std::vector<at::Tensor> leaves(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> ts;
  for (const auto& e : v.toTupleRef().elements()) ts.push_back(e.toTensor());
  return ts;
}

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << " tensor " << i;
    const at::Tensor g = got[i].cpu();
    EXPECT_TRUE(at::allclose(g, want[i], 1e-4, 1e-4))
        << what << " tensor " << i << ": off by " << (g - want[i]).abs().max().item<double>();
  }
}

struct Firing {
  std::string name;
  std::vector<at::Tensor> tensors;  // copies, taken in the hook
  std::size_t args = 0;
};

/// Hooks every point of `net` and records what each firing shows, copied in the hook.
std::vector<modhooks::RemovableHandle> record_all(modhooks::aoti::Model& net,
                                                  std::vector<Firing>& log) {
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name), [&log](const modhooks::aoti::Point& p,
                                const std::vector<c10::IValue>& args, const c10::IValue& out) {
          std::vector<at::Tensor> copies;
          for (const auto& t : leaves(out)) copies.push_back(t.clone());
          log.push_back({p.name(), copies, args.size()});
        }));
  }
  return handles;
}

/// Every point fires in eager's order with eager's tensors, and the outputs are eager's.
void expect_eager(const std::string& name, int runs = 1) {
  Case c(name);
  modhooks::aoti::Model net(c.path);
  ASSERT_FALSE(net.points().empty()) << name << ": its package lists no points";
  std::vector<Firing> log;
  auto handles = record_all(net, log);
  for (int run = 0; run < runs; ++run) {
    log.clear();
    auto out = net.run(c.inputs(run));
    auto order = c.order(run);
    ASSERT_EQ(log.size(), order.size()) << name << " run " << run;
    for (std::size_t n = 0; n < log.size(); ++n) {
      ASSERT_EQ(log[n].name, order[n]) << name << ": firing " << n;
      expect_close(log[n].tensors, c.fired(static_cast<int>(n), run),
                   name + ": firing " + std::to_string(n) + " (" + order[n] + ")");
    }
    expect_close(out, c.outputs("output", run), name + ": outputs");
  }
}

/// `out`, the output of `p`, times `factor`: a replacement of the same structure.
c10::IValue scaled(const modhooks::aoti::Point& p, const c10::IValue& out, double factor) {
  if (p.single_output()) return out.toTensor() * factor;
  std::vector<c10::IValue> scaled;
  for (const auto& t : leaves(out)) scaled.emplace_back(t * factor);
  return c10::ivalue::Tuple::create(std::move(scaled));
}

/// Doubling the output of the case's replacement point changes what follows as in eager.
void expect_replacement(const std::string& name) {
  Case c(name);
  modhooks::aoti::Model net(c.path);
  auto h = modhooks::register_forward_hook(
      net.point(c.info["replace"].get<std::string>()),
      [](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&, const c10::IValue& out) {
        return scaled(p, out, 2);
      });
  expect_close(net.run(c.inputs()), c.outputs("replaced"), name + ": replaced outputs");
  h.remove();
  expect_close(net.run(c.inputs()), c.outputs("output"), name + ": after remove");
}

TEST(AotiModel, PointsAreTheExportedModulesInGraphOrderWithTheirTypes) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  std::vector<std::string> names;
  for (const auto& p : c.info["points"]) names.push_back(p["name"].get<std::string>());
  EXPECT_EQ(net.points(), names);
  EXPECT_EQ(net.points(), (std::vector<std::string>{"id", "a", "relu", "b", "two", "flat", "head"}))
      << "first reached: relu runs on a's output before b runs";
  EXPECT_EQ(c.order(),
            (std::vector<std::string>{"id", "a", "relu", "b", "relu", "two", "flat", "head"}));
  EXPECT_EQ(net.point("a").type_name(), "Linear");
  EXPECT_EQ(net.point("two").type_name(), "Two");
  EXPECT_TRUE(net.point("a").has_inputs());
  EXPECT_FALSE(net.point("b").has_inputs());
  EXPECT_FALSE(net.point("two").single_output());
  EXPECT_EQ(net.metadata().at("modhooks.abi"), "0.1");
}

TEST(AotiModel, UnknownPointNamesThePackageAndItsPoints) {
  modhooks::aoti::Model net(package("branchy.pt2"));
  const auto text =
      expect_error<modhooks::KeyError>([&] { net.point("c"); }, "aoti.model.no_point");
  EXPECT_NE(text.find("branchy.pt2 has no point 'c'; its points are 'id', 'a', 'relu', 'b'"),
            std::string::npos)
      << text;
}

TEST(AotiModel, PackageWithoutPointsHasNone) {
  modhooks::aoti::Model net(package("branchy.plain.pt2"));
  EXPECT_TRUE(net.points().empty());
  EXPECT_ERROR_WITH(net.point("a"), KeyError, "aoti.model.no_point", "exported without points");
  Case c("branchy");
  expect_close(net.run(c.inputs()), c.outputs(), "plain package");
}

TEST(AotiModel, BadFilesAreTypedErrors) {
  EXPECT_ERROR(modhooks::aoti::Model(package("absent.pt2")), RuntimeError,
               "aoti.package.open_failed");
  EXPECT_ERROR(modhooks::aoti::Model(package("branchy.json")), FormatError,
               "aoti.package.not_a_package");
  EXPECT_ERROR_WITH(modhooks::aoti::Model(package("other_abi.pt2")), RuntimeError,
                    "aoti.package.abi_mismatch", "exported for the modhooks ABI 9.9");
}

TEST(AotiModel, RefusesBeforeLoadingTheCompiledLibrary) {
  // Each package's library is cut short: a check made after loading it would see unloadable.
  EXPECT_ERROR_WITH(modhooks::aoti::Model(package("other_abi_broken_library.pt2")), RuntimeError,
                    "aoti.package.abi_mismatch", "exported for the modhooks ABI 9.9");
  if (at::hasCUDA()) GTEST_SKIP() << "this process has CUDA";
  EXPECT_ERROR_WITH(modhooks::aoti::Model(package("cuda_device_broken_library.pt2")), RuntimeError,
                    "aoti.package.cuda_unavailable", "was compiled for CUDA");
}

TEST(AotiEager, BranchyFiresInEagerOrder) { expect_eager("branchy"); }
TEST(AotiEager, ResNet18EverySubmodule) { expect_eager("resnet18"); }
TEST(AotiEager, ResNet18Blocks) { expect_eager("resnet18_blocks"); }
TEST(AotiEager, VisionTransformer) { expect_eager("vit"); }
TEST(AotiEager, Bert) { expect_eager("bert"); }
TEST(AotiEager, DynamicBatch) { expect_eager("dynamic", 3); }

TEST(AotiReplace, Branchy) { expect_replacement("branchy"); }
TEST(AotiReplace, ResNet18) { expect_replacement("resnet18"); }
TEST(AotiReplace, ResNet18Block) { expect_replacement("resnet18_blocks"); }
TEST(AotiReplace, VisionTransformer) { expect_replacement("vit"); }
TEST(AotiReplace, Bert) { expect_replacement("bert"); }
TEST(AotiReplace, DynamicBatch) { expect_replacement("dynamic"); }

// Submodules returning their parameter, buffer, a view of the buffer and a constant, exported
// non-strict and strict: the package returns the model's one output (an in-place point there made
// it return the written tensors too), a replacement changes that run only, and the next run is
// bitwise the plain package's.
TEST(AotiEager, OwnTensors) {
  expect_eager("own_tensors");
  expect_eager("own_tensors_strict");
}

/// Zeroing the output of the point "pos" (a parameter returned whole) changes that run; after
/// the hook is removed, the next run is bitwise the package without points.
void expect_held_replacement_changes_that_run_only(const std::string& name) {
  expect_replacement(name);
  Case c(name);
  modhooks::aoti::Model plain(package(name + ".plain.pt2"));
  modhooks::aoti::Model net(c.path);
  const auto expected = plain.run(c.inputs());
  auto h = modhooks::register_forward_hook(
      net.point("pos"),
      [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        return c10::IValue(at::zeros_like(out.toTensor()));
      });
  const auto replaced = net.run(c.inputs());
  ASSERT_EQ(replaced.size(), expected.size());
  EXPECT_FALSE(at::equal(replaced[0], expected[0]));
  h.remove();
  const auto after = net.run(c.inputs());
  ASSERT_EQ(after.size(), expected.size());
  EXPECT_TRUE(at::equal(after[0], expected[0]));
}

TEST(AotiReplace, OwnTensorsChangeThatRunOnly) {
  expect_held_replacement_changes_that_run_only("own_tensors");
  expect_held_replacement_changes_that_run_only("own_tensors_strict");
}

TEST(AotiReplace, IdentityOutputReplacedLeavesTheCallersInputAlone) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  auto x = c.inputs()[0].clone();
  const auto before = x.clone();
  auto h = modhooks::register_forward_hook(
      net.point("id"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                          const c10::IValue& out) { return out.toTensor() * 0; });
  net.run({x});
  EXPECT_TRUE(x.equal(before));  // the copying operator: Identity returns its input
}

/// `net`'s outputs on a copy of `inputs`, with the copy checked unchanged afterwards.
std::vector<at::Tensor> run_keeping_inputs(modhooks::aoti::Model& net,
                                           const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> xs;
  for (const auto& x : inputs) xs.push_back(x.clone());
  auto out = net.run(xs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(xs[i].equal(inputs[i])) << "a hook's edit reached the caller's input " << i;
  }
  return out;
}

void expect_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << what << i;
}

// A hook's edit in place is what the module's caller (a pre-hook's: the module) receives, as a
// replacement of the same values is, at an in-place point ("two"), at a copying point whose output
// is its input ("id"), and at an input point ("a", whose input the branch "b" reads too); the
// caller's tensors never change.
TEST(AotiHooks, AnEditInPlaceIsWhatTheCallerReceivesAndReachesNothingElse) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  const auto plain = run_keeping_inputs(net, c.inputs());
  for (const std::string point : {"two", "id"}) {
    std::vector<at::Tensor> edited, replaced;
    {
      modhooks::ScopedHandle h(modhooks::register_forward_hook(
          net.point(point), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                               const c10::IValue& out) {
            for (const auto& t : leaves(out)) t.mul_(3);
          }));
      edited = run_keeping_inputs(net, c.inputs());
    }
    {
      modhooks::ScopedHandle h(modhooks::register_forward_hook(
          net.point(point), [](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&,
                               const c10::IValue& out) { return scaled(p, out, 3); }));
      replaced = run_keeping_inputs(net, c.inputs());
    }
    expect_equal(edited, replaced, "edited at " + point + ", output ");
    EXPECT_FALSE(edited[0].equal(plain[0])) << point;
  }
  std::vector<at::Tensor> edited, replaced;
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args) {
          args[0].toTensor().mul_(3);
        }));
    edited = run_keeping_inputs(net, c.inputs());
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args) {
          return std::vector<c10::IValue>{args[0].toTensor() * 3};
        }));
    replaced = run_keeping_inputs(net, c.inputs());
  }
  expect_equal(edited, replaced, "edited at a's input, output ");
  EXPECT_FALSE(edited[0].equal(plain[0]));
}

TEST(AotiNoHooks, OutputsBitwiseEqualToThePackageWithoutPoints) {
  for (const std::string name : {"branchy", "resnet18_blocks"}) {
    Case c(name);
    modhooks::aoti::Model hooked(c.path);
    modhooks::aoti::Model plain(package(name + ".plain.pt2"));
    auto a = hooked.run(c.inputs());
    auto b = plain.run(c.inputs());
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << name << " " << i;
  }
}

TEST(AotiPreHooks, InputPointsShowArgsAndTakeReplacements) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  std::vector<Firing> pre;
  std::vector<std::size_t> forward_args;
  auto h1 = modhooks::register_forward_pre_hook(
      net.point("a"), [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>& args) {
        pre.push_back({p.name(), {args[0].toTensor().clone()}, args.size()});
      });
  auto h2 = modhooks::register_forward_pre_hook(
      net.point("two"), [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>& args) {
        pre.push_back({p.name(), {args[0].toTensor().clone()}, args.size()});
      });
  std::vector<at::Tensor> a_args;
  auto h3 = modhooks::register_forward_hook(
      net.point("a"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args,
                          const c10::IValue&) { a_args.push_back(args.at(0).toTensor()); });
  net.run(c.inputs());
  ASSERT_EQ(pre.size(), 2U);
  EXPECT_EQ(pre[0].name, c.order(0, "pre_order")[0]);
  EXPECT_EQ(pre[1].name, c.order(0, "pre_order")[1]);
  expect_close(pre[0].tensors, c.fired(0, 0, "pre"), "pre-hook args of a");
  expect_close(pre[1].tensors, c.fired(1, 0, "pre"), "pre-hook args of two");
  ASSERT_EQ(a_args.size(), 1U);  // kept past the run: still the args
  expect_close(a_args, c.fired(0, 0, "pre"), "forward hook args of a");

  // A replacement of the args is what the module computes with: zero input, bias out.
  h1.remove();
  auto zero = modhooks::register_forward_pre_hook(
      net.point("a"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args) {
        return std::vector<c10::IValue>{args[0].toTensor() * 0};
      });
  std::vector<at::Tensor> a_out;
  auto h4 = modhooks::register_forward_hook(
      net.point("a"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                          const c10::IValue& out) { a_out.push_back(out.toTensor().clone()); });
  net.run(c.inputs());
  ASSERT_EQ(a_out.size(), 1U);
  EXPECT_EQ(a_out[0].sizes(), c.inputs()[0].sizes());  // Linear(8, 8) on the 4 x 8 input
  // Every row is a's bias; from the recorded input the rows would differ.
  EXPECT_TRUE(a_out[0].equal(a_out[0][0].expand_as(a_out[0])));
}

TEST(AotiKeep, KeptOutputsStayValidAfterTheModelReusesItsBuffers) {
  Case c("resnet18");
  modhooks::aoti::Model net(c.path);
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> kept;  // the tensors themselves
  std::vector<at::Tensor> views;
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name), [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&,
                             const c10::IValue& out) {
          kept.emplace_back(p.name(), leaves(out));
          views.push_back(leaves(out)[0].narrow(0, 0, 1));  // a view only, the tensor dropped
        }));
  }
  net.run(c.inputs());
  auto order = c.order();
  ASSERT_EQ(kept.size(), order.size());
  for (std::size_t n = 0; n < kept.size(); ++n) {
    expect_close(kept[n].second, c.fired(static_cast<int>(n)), "kept " + kept[n].first);
    expect_close({views[n]}, {c.fired(static_cast<int>(n))[0].narrow(0, 0, 1)},
                 "kept view of " + kept[n].first);
  }
}

/// Hooks that hold what they are shown only weakly, or change it, and drop it: a later firing
/// must show its own values, sizes and strides all the same, and the weak references must find
/// the tensors dead after the run, as any tensor that no one kept. One run for each of the
/// four, since a tensor that one firing dropped is the next firing's.
TEST(AotiKeep, WhatAHookDidToATensorItDroppedIsGoneAtTheNextPoint) {
  Case c("resnet18");
  modhooks::aoti::Model net(c.path);
  const auto order = c.order();
  for (int what = 0; what < 4; ++what) {
    SCOPED_TRACE("case " + std::to_string(what));
    std::vector<Firing> log;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> weak;
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> weak_storages;
    std::vector<modhooks::ScopedHandle> handles;  // removed before what they capture goes
    for (const auto& name : net.points()) {
      handles.emplace_back(modhooks::register_forward_hook(
          net.point(name), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                               const c10::IValue& out) {
            at::Tensor t = leaves(out)[0];
            if (what == 0) weak.emplace_back(t.getIntrusivePtr());
            if (what == 1) weak_storages.push_back(t.storage().getWeakStorageImpl());
            if (what == 2) t._set_neg(true);
            if (what == 3) t.unsqueeze_(0).transpose_(0, 1);
          }));
      // Prepended: each point's record is taken before the hook above changes its tensor.
      handles.emplace_back(modhooks::register_forward_hook(
          net.point(name),
          [&log](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&,
                 const c10::IValue& out) {
            log.push_back({p.name(), {leaves(out)[0].clone()}});
          },
          modhooks::ForwardHookOptions().prepend(true)));
    }
    net.run(c.inputs());
    ASSERT_EQ(log.size(), order.size());
    for (std::size_t n = 0; n < log.size(); ++n) {
      ASSERT_EQ(log[n].name, order[n]);
      expect_close(log[n].tensors, c.fired(static_cast<int>(n)),
                   "firing " + std::to_string(n) + " (" + order[n] + ")");
    }
    for (const auto& w : weak) EXPECT_TRUE(w.expired());
    for (const auto& w : weak_storages) EXPECT_TRUE(w.expired());
  }
}

TEST(AotiHooks, PrependOrderHandlesAndGlobalHooks) {
  modhooks::aoti::Model net(package("branchy.pt2"));
  std::vector<std::string> log;
  auto first = modhooks::register_forward_hook(
      net.point("b"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                          const c10::IValue&) { log.push_back("first"); });
  auto second = modhooks::register_forward_hook(
      net.point("b"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        log.push_back("prepended");
      },
      modhooks::ForwardHookOptions().prepend(true));
  auto global = modhooks::register_module_forward_hook(
      [&](const modhooks::aoti::Point& p, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (p.name() == "b") log.push_back("global");
      });
  // An `auto&` global hook is for modules: it does not reach points.
  int generic = 0;
  auto modules_only = modhooks::register_module_forward_hook(
      [&](auto&, const std::vector<c10::IValue>&, const c10::IValue&) { ++generic; });
  Case c("branchy");
  net.run(c.inputs());
  EXPECT_EQ(log, (std::vector<std::string>{"global", "prepended", "first"}));
  EXPECT_EQ(generic, 0);
  log.clear();
  second.remove();
  global.remove();
  net.run(c.inputs());
  EXPECT_EQ(log, (std::vector<std::string>{"first"}));
}

TEST(AotiHooks, TwoModelsOfOnePackageAreHookedSeparately) {
  Case c("branchy");
  modhooks::aoti::Model one(c.path);
  modhooks::aoti::Model two(c.path);
  int fired = 0;
  auto h = modhooks::register_forward_hook(
      one.point("head"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        ++fired;
        return out.toTensor() + 1;
      });
  auto y2 = two.run(c.inputs());
  EXPECT_EQ(fired, 0);
  expect_close(y2, c.outputs(), "unhooked instance");
  auto y1 = one.run(c.inputs());
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(at::allclose(y1[0], c.outputs()[0] + 1, 1e-4, 1e-4));
}

TEST(AotiHooks, RunsFromSeveralThreadsFireTheirOwnModelsHooks) {
  Case c("branchy");
  modhooks::aoti::Model shared(c.path, /*num_runners=*/2);
  modhooks::aoti::Model other(c.path);
  std::atomic<int> shared_fired{0};
  std::atomic<int> other_fired{0};
  auto h1 = modhooks::register_forward_hook(
      shared.point("head"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                                const c10::IValue&) { ++shared_fired; });
  auto h2 = modhooks::register_forward_hook(
      other.point("head"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        ++other_fired;
        return out.toTensor() * 0;
      });
  const auto inputs = c.inputs();
  const auto want = c.outputs();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        if (t % 2 == 0) {
          auto y = shared.run(inputs);
          if (!at::allclose(y[0], want[0], 1e-4, 1e-4)) ++wrong;
        } else {
          auto y = other.run(inputs);
          if (y[0].abs().max().item<float>() != 0) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(shared_fired.load(), 50);
  EXPECT_EQ(other_fired.load(), 50);
}

TEST(AotiErrors, WrongReplacementNamesThePointAndTheModelStaysUsable) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("b"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                           const c10::IValue& out) { return out.toTensor().narrow(1, 0, 3); }));
    EXPECT_ERROR_WITH(net.run(c.inputs()), ValueError, "aoti.hook.replacement_mismatch",
                      "a hook on point 'b' replaced output tensor 0 with Float[4, 3] on cpu; the "
                      "compiled graph expects Float[4, 8] on cpu");
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("b"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                           const c10::IValue& out) { return out.toTensor().to(at::kDouble); }));
    EXPECT_ERROR(net.run(c.inputs()), ValueError, "aoti.hook.replacement_mismatch");
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("two"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&,
                             const c10::IValue& out) { return leaves(out)[0]; }));
    EXPECT_ERROR_WITH(net.run(c.inputs()), TypeError, "aoti.hook.bad_replacement",
                      "the compiled graph holds 2 tensors");
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"), [](const modhooks::aoti::Point&, const std::vector<c10::IValue>&) {
          return std::vector<c10::IValue>{};
        }));
    EXPECT_ERROR(net.run(c.inputs()), TypeError, "aoti.hook.bad_replacement");
  }
  expect_close(net.run(c.inputs()), c.outputs(), "after the failed runs");
}

/// After a failed run: a run on zeros (the model's buffers then hold other values), then one that
/// gives eager's outputs.
void expect_next_runs_as_eager(modhooks::aoti::Model& net, const Case& c) {
  std::vector<at::Tensor> zeros;
  for (const auto& x : c.inputs()) zeros.push_back(at::zeros_like(x));
  net.run(zeros);
  expect_close(net.run(c.inputs()), c.outputs(), "next run");
}

/// Where `point` first fires in eager's order, or -1.
int first_firing(const Case& c, const std::string& point) {
  const auto order = c.order();
  const auto at = std::find(order.begin(), order.end(), point);
  return at == order.end() ? -1 : static_cast<int>(at - order.begin());
}

/// The CPU allocator, failing every allocation of memory after the first `successes`: an
/// out-of-memory half-way through what a firing allocates. Installed for its lifetime.
class FailingAllocator final : public c10::Allocator {
 public:
  explicit FailingAllocator(int successes)
      : real_(c10::GetAllocator(c10::DeviceType::CPU)), left_(successes) {
    c10::SetAllocator(c10::DeviceType::CPU, this);
  }
  FailingAllocator(const FailingAllocator&) = delete;
  FailingAllocator& operator=(const FailingAllocator&) = delete;
  ~FailingAllocator() override { c10::SetAllocator(c10::DeviceType::CPU, real_); }

  c10::DataPtr allocate(std::size_t n) override {
    TORCH_CHECK_WITH(OutOfMemoryError, n == 0 || left_-- > 0, "injected: out of memory");
    return real_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return real_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    real_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* real_;
  int left_;
};

TEST(AotiKeep, ACopyThatFailsHalfWayLeavesNoKeptTensorOverTheModelsMemory) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  std::vector<at::Tensor> kept;  // both tensors of `two`, and a view of the second
  std::optional<FailingAllocator> oom;
  auto h = modhooks::register_forward_hook(
      net.point("two"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        kept = leaves(out);
        kept.push_back(kept[1].narrow(0, 0, 1));
        oom.emplace(1);  // the first kept tensor's copy succeeds, the second's fails
      });
  try {
    net.run(c.inputs());
    ADD_FAILURE() << "the run did not throw";
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.id(), "aoti.point.keep_failed");
    EXPECT_NE(std::string(e.what()).find("'two'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("injected: out of memory"), std::string::npos);
  }
  oom.reset();
  h.remove();
  expect_next_runs_as_eager(net, c);
  const int two = first_firing(c, "two");
  ASSERT_GE(two, 0);
  ASSERT_EQ(kept.size(), 3u);
  expect_close({kept[0]}, {c.fired(two)[0]}, "the copied tensor");
  for (const auto& gone : {kept[1], kept[2]}) {
    try {
      gone.sum();
      ADD_FAILURE() << "a kept tensor that was not copied was read";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("kept by a hook there, holds no data"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(kept[1].fill_(0), c10::Error);
}

TEST(AotiErrors, HookThatThrowsEndsTheRunWithItsExceptionAndTheNextRunWorks) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  bool raise = true;
  // What a hook kept of the failed run, before the hook after it threw, stays valid.
  std::vector<at::Tensor> kept;
  auto keep = modhooks::register_forward_hook(
      net.point("relu"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        if (raise) kept.push_back(out.toTensor());
      });
  auto h = modhooks::register_forward_hook(
      net.point("relu"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (raise) throw std::invalid_argument("the hook's own text");
      });
  try {
    net.run(c.inputs());
    ADD_FAILURE() << "the run did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "the hook's own text");
  }
  raise = false;
  expect_next_runs_as_eager(net, c);
  const int relu = first_firing(c, "relu");
  ASSERT_GE(relu, 0);
  ASSERT_EQ(kept.size(), 1u);
  expect_close(kept, {c.fired(relu)[0]}, "kept before the throw");
}

TEST(AotiErrors, AHookThatRunsItsOwnModelWhileEveryRunnerServesRaises) {
  Case c("branchy");
  modhooks::aoti::Model net(c.path);  // one runner, which the outer run holds
  bool again = true;
  auto h = modhooks::register_forward_hook(
      net.point("relu"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (again) net.run(c.inputs());
      });
  EXPECT_ERROR(net.run(c.inputs()), RuntimeError, "aoti.model.reentrant_run");
  again = false;
  expect_close(net.run(c.inputs()), c.outputs(), "the next run");
  // With two runners the nested run takes the second one.
  modhooks::aoti::Model two(c.path, /*num_runners=*/2);
  int firings = 0;
  auto h2 = modhooks::register_forward_hook(
      two.point("relu"),
      [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (firings++ == 0) expect_close(two.run(c.inputs()), c.outputs(), "the nested run");
      });
  expect_close(two.run(c.inputs()), c.outputs(), "the outer run");
  const auto order = c.order();
  EXPECT_EQ(firings, 2 * std::count(order.begin(), order.end(), "relu"));  // two runs
}

TEST(AotiErrors, NoRunnersAndAMovedFromModelAreErrors) {
  EXPECT_ERROR(modhooks::aoti::Model(package("branchy.pt2"), 0), ValueError,
               "aoti.model.num_runners");
  Case c("branchy");
  modhooks::aoti::Model net(c.path);
  modhooks::aoti::Model moved(std::move(net));
  EXPECT_ERROR(net.run(c.inputs()), RuntimeError, "aoti.model.moved_from");  // NOLINT
  EXPECT_ERROR(net.point("relu"), RuntimeError, "aoti.model.moved_from");
  EXPECT_ERROR(net.points(), RuntimeError, "aoti.model.moved_from");
  EXPECT_ERROR(net.path(), RuntimeError, "aoti.model.moved_from");
  expect_close(moved.run(c.inputs()), c.outputs(), "the model moved to");
}

// The GPU machine's check (scripts/device-check.sh) writes this package with
// `aoti_packages.py <dir> --cuda`; elsewhere there is none and the case skips.
TEST(AotiCuda, PackageCompiledForCudaFiresHooksOnDeviceTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!std::ifstream(package("branchy_cuda.pt2"))) {
    GTEST_SKIP() << "no CUDA package: run tests/python/aoti_packages.py <dir> --cuda";
  }
  Case c("branchy_cuda");
  modhooks::aoti::Model net(c.path);
  std::vector<Firing> log;
  auto handles = record_all(net, log);
  std::vector<c10::Device> devices;
  auto pre = modhooks::register_forward_pre_hook(
      net.point("a"), [&](const modhooks::aoti::Point&, const std::vector<c10::IValue>& args) {
        devices.push_back(args[0].toTensor().device());
      });
  auto out = net.run(c.inputs());
  ASSERT_EQ(log.size(), c.order().size());
  for (std::size_t n = 0; n < log.size(); ++n) {
    EXPECT_EQ(log[n].name, c.order()[n]);
    EXPECT_TRUE(log[n].tensors[0].is_cuda()) << log[n].name;
    expect_close(log[n].tensors, c.fired(static_cast<int>(n)), "cuda firing " + log[n].name);
  }
  ASSERT_EQ(devices.size(), 1U);
  EXPECT_TRUE(devices[0].is_cuda());
  expect_close(out, c.outputs(), "cuda outputs");
  expect_replacement("branchy_cuda");
}

TEST(AotiErrors, WrongInputsAreARuntimeError) {
  modhooks::aoti::Model net(package("branchy.pt2"));
  EXPECT_ERROR(net.run({}), RuntimeError, "aoti.model.run_failed");
}

}  // namespace
