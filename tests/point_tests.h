// SPDX-License-Identifier: BSD-3-Clause
// The hook-point tests that every kind of compiled program passes (an AOTInductor package,
// aoti_test.cpp; an ExecuTorch program, executorch_test.cpp), against Python eager's hooks on the
// same weights: typed over a `Kind` that names the program type and its fixture.
//
//   using Net = ...; using Point = ...;
//   static std::string folder();                         // the fixture's folder
//   static std::string extension();                      // ".pt2"
//   static std::string file(const std::string& name);    // folder() / name + extension()
//   static std::string id(const std::string& what);      // "model.no_point" -> the kind's id
//   static std::string file_id(const std::string& what); // "open_failed" -> the kind's id for
//                                                        // a file it refuses
//   static std::unique_ptr<Net> serving_threads(const std::string& path);  // for 2 threads
//
// The fixture writes, per case: the program, `<case>.json` (the point table, eager's firing
// order, the point the replacement doubles) and `<case>.safetensors` (inputs, every firing's
// tensors, eager's outputs with and without the replacement): tests/python/aoti_packages.py.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/modhooks.h"
#include "test_util.h"

/// The program and point types of the typed test's kind.
#define MODHOOKS_POINT_TYPES           \
  using Net = typename TypeParam::Net; \
  using Point = typename TypeParam::Point

namespace point_tests {

/// One case of `Kind`'s fixture: its program, its point table and eager's record.
template <class Kind>
struct Case {
  explicit Case(const std::string& name)
      : path(Kind::file(name)),
        record(modhooks::load(Kind::folder() + "/" + name + ".safetensors")),
        device(name.size() > 5 && name.substr(name.size() - 5) == "_cuda" ? c10::Device("cuda")
                                                                          : c10::Device("cpu")) {
    std::ifstream in(Kind::folder() + "/" + name + ".json");
    info = nlohmann::json::parse(in);
  }
  std::vector<at::Tensor> inputs(int run = 0) const {
    std::vector<at::Tensor> xs;
    for (int i = 0; i < info["runs"][run]["inputs"].template get<int>(); ++i) {
      xs.push_back(record.at(prefix(run) + "input." + std::to_string(i)).to(device));
    }
    return xs;
  }
  std::vector<std::string> order(int run = 0, const char* key = "order") const {
    return info["runs"][run][key].template get<std::vector<std::string>>();
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
    for (int j = 0; j < info["runs"][run]["outputs"].template get<int>(); ++j) {
      ts.push_back(record.at(prefix(run) + what + "." + std::to_string(j)));
    }
    return ts;
  }
  static std::string prefix(int run) { return run == 0 ? "" : "run" + std::to_string(run) + "."; }

  std::string path;
  modhooks::StateDict record;
  c10::Device device;  // where the program runs: inputs go there, the record stays on the CPU
  nlohmann::json info;
};

inline std::vector<at::Tensor> leaves(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> ts;
  for (const auto& e : v.toTupleRef().elements()) ts.push_back(e.toTensor());
  return ts;
}

inline void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
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
template <class Net>
std::vector<modhooks::RemovableHandle> record_all(Net& net, std::vector<Firing>& log) {
  using Point = std::decay_t<decltype(net.point(""))>;
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name),
        [&log](const Point& p, const std::vector<c10::IValue>& args, const c10::IValue& out) {
          std::vector<at::Tensor> copies;
          for (const auto& t : leaves(out)) copies.push_back(t.clone());
          log.push_back({p.name(), copies, args.size()});
        }));
  }
  return handles;
}

/// Every point fires in eager's order with eager's tensors, and the outputs are eager's.
template <class Kind>
void expect_eager(const std::string& name, int runs = 1) {
  Case<Kind> c(name);
  typename Kind::Net net(c.path);
  ASSERT_FALSE(net.points().empty()) << name << ": its program lists no points";
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
template <class Point>
c10::IValue scaled(const Point& p, const c10::IValue& out, double factor) {
  if (p.single_output()) return out.toTensor() * factor;
  std::vector<c10::IValue> scaled;
  for (const auto& t : leaves(out)) scaled.emplace_back(t * factor);
  return c10::ivalue::Tuple::create(std::move(scaled));
}

/// Doubling the output of the case's replacement point changes what follows as in eager.
template <class Kind>
void expect_replacement(const std::string& name) {
  Case<Kind> c(name);
  typename Kind::Net net(c.path);
  auto h = modhooks::register_forward_hook(
      net.point(c.info["replace"].template get<std::string>()),
      [](const typename Kind::Point& p, const std::vector<c10::IValue>&, const c10::IValue& out) {
        return scaled(p, out, 2);
      });
  expect_close(net.run(c.inputs()), c.outputs("replaced"), name + ": replaced outputs");
  h.remove();
  expect_close(net.run(c.inputs()), c.outputs("output"), name + ": after remove");
}

template <class Kind>
class Points : public ::testing::Test {};
TYPED_TEST_SUITE_P(Points);

TYPED_TEST_P(Points, ModelPointsAreTheExportedModulesInGraphOrderWithTheirTypes) {
  using Net = typename TypeParam::Net;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  std::vector<std::string> names;
  for (const auto& p : c.info["points"]) names.push_back(p["name"].template get<std::string>());
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
}

TYPED_TEST_P(Points, ModelUnknownPointNamesThePackageAndItsPoints) {
  using Net = typename TypeParam::Net;
  Net net(TypeParam::file("branchy"));
  const auto text =
      expect_error<modhooks::KeyError>([&] { net.point("c"); }, TypeParam::id("model.no_point"));
  EXPECT_NE(text.find("branchy" + TypeParam::extension() +
                      " has no point 'c'; its points are 'id', 'a', 'relu', 'b'"),
            std::string::npos)
      << text;
}

TYPED_TEST_P(Points, ModelPackageWithoutPointsHasNone) {
  using Net = typename TypeParam::Net;
  Net net(TypeParam::file("branchy.plain"));
  EXPECT_TRUE(net.points().empty());
  EXPECT_ERROR_WITH(net.point("a"), KeyError, TypeParam::id("model.no_point"),
                    "exported without points");
  Case<TypeParam> c("branchy");
  expect_close(net.run(c.inputs()), c.outputs(), "plain package");
}

TYPED_TEST_P(Points, EagerBranchyFiresInEagerOrder) { expect_eager<TypeParam>("branchy"); }
TYPED_TEST_P(Points, EagerResNet18EverySubmodule) { expect_eager<TypeParam>("resnet18"); }
TYPED_TEST_P(Points, EagerResNet18Blocks) { expect_eager<TypeParam>("resnet18_blocks"); }
TYPED_TEST_P(Points, EagerVisionTransformer) { expect_eager<TypeParam>("vit"); }

TYPED_TEST_P(Points, ReplaceBranchy) { expect_replacement<TypeParam>("branchy"); }
TYPED_TEST_P(Points, ReplaceResNet18) { expect_replacement<TypeParam>("resnet18"); }
TYPED_TEST_P(Points, ReplaceResNet18Block) { expect_replacement<TypeParam>("resnet18_blocks"); }
TYPED_TEST_P(Points, ReplaceVisionTransformer) { expect_replacement<TypeParam>("vit"); }

// Submodules returning their parameter, buffer, a view of the buffer and a constant, exported
// non-strict and strict: the package returns the model's one output (an in-place point there made
// it return the written tensors too), a replacement changes that run only, and the next run is
// bitwise the plain package's.
TYPED_TEST_P(Points, EagerOwnTensors) {
  expect_eager<TypeParam>("own_tensors");
  expect_eager<TypeParam>("own_tensors_strict");
}

/// Zeroing the output of the point "pos" (a parameter returned whole) changes that run; after
/// the hook is removed, the next run is bitwise the package without points.
template <class Kind>
void expect_held_replacement_changes_that_run_only(const std::string& name) {
  using Net = typename Kind::Net;
  using Point = typename Kind::Point;
  expect_replacement<Kind>(name);
  Case<Kind> c(name);
  Net plain(Kind::file(name + ".plain"));
  Net net(c.path);
  const auto expected = plain.run(c.inputs());
  auto h = modhooks::register_forward_hook(
      net.point("pos"), [](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
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

TYPED_TEST_P(Points, ReplaceOwnTensorsChangeThatRunOnly) {
  expect_held_replacement_changes_that_run_only<TypeParam>("own_tensors");
  expect_held_replacement_changes_that_run_only<TypeParam>("own_tensors_strict");
}

TYPED_TEST_P(Points, ReplaceIdentityOutputReplacedLeavesTheCallersInputAlone) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  auto x = c.inputs()[0].clone();
  const auto before = x.clone();
  auto h = modhooks::register_forward_hook(
      net.point("id"), [](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        return out.toTensor() * 0;
      });
  net.run({x});
  EXPECT_TRUE(x.equal(before));  // the copying operator: Identity returns its input
}

/// `net`'s outputs on a copy of `inputs`, with the copy checked unchanged afterwards.
template <class Net>
std::vector<at::Tensor> run_keeping_inputs(Net& net, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> xs;
  for (const auto& x : inputs) xs.push_back(x.clone());
  auto out = net.run(xs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(xs[i].equal(inputs[i])) << "a hook's edit reached the caller's input " << i;
  }
  return out;
}

inline void expect_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << what << i;
}

// A hook's edit in place is what the module's caller (a pre-hook's: the module) receives, as a
// replacement of the same values is, at an in-place point ("two"), at a copying point whose output
// is its input ("id"), and at an input point ("a", whose input the branch "b" reads too); the
// caller's tensors never change.
TYPED_TEST_P(Points, HooksAnEditInPlaceIsWhatTheCallerReceivesAndReachesNothingElse) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  const auto plain = run_keeping_inputs(net, c.inputs());
  for (const std::string point : {"two", "id"}) {
    std::vector<at::Tensor> edited, replaced;
    {
      modhooks::ScopedHandle h(modhooks::register_forward_hook(
          net.point(point),
          [](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
            for (const auto& t : leaves(out)) t.mul_(3);
          }));
      edited = run_keeping_inputs(net, c.inputs());
    }
    {
      modhooks::ScopedHandle h(modhooks::register_forward_hook(
          net.point(point), [](const Point& p, const std::vector<c10::IValue>&,
                               const c10::IValue& out) { return scaled(p, out, 3); }));
      replaced = run_keeping_inputs(net, c.inputs());
    }
    expect_equal(edited, replaced, "edited at " + point + ", output ");
    EXPECT_FALSE(edited[0].equal(plain[0])) << point;
  }
  std::vector<at::Tensor> edited, replaced;
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"),
        [](const Point&, const std::vector<c10::IValue>& args) { args[0].toTensor().mul_(3); }));
    edited = run_keeping_inputs(net, c.inputs());
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"), [](const Point&, const std::vector<c10::IValue>& args) {
          return std::vector<c10::IValue>{args[0].toTensor() * 3};
        }));
    replaced = run_keeping_inputs(net, c.inputs());
  }
  expect_equal(edited, replaced, "edited at a's input, output ");
  EXPECT_FALSE(edited[0].equal(plain[0]));
}

TYPED_TEST_P(Points, NoHooksOutputsBitwiseEqualToThePackageWithoutPoints) {
  using Net = typename TypeParam::Net;
  for (const std::string name : {"branchy", "resnet18_blocks"}) {
    Case<TypeParam> c(name);
    Net hooked(c.path);
    Net plain(TypeParam::file(name + ".plain"));
    auto a = hooked.run(c.inputs());
    auto b = plain.run(c.inputs());
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << name << " " << i;
  }
}

TYPED_TEST_P(Points, PreHooksInputPointsShowArgsAndTakeReplacements) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  std::vector<Firing> pre;
  std::vector<std::size_t> forward_args;
  auto h1 = modhooks::register_forward_pre_hook(
      net.point("a"), [&](const Point& p, const std::vector<c10::IValue>& args) {
        pre.push_back({p.name(), {args[0].toTensor().clone()}, args.size()});
      });
  auto h2 = modhooks::register_forward_pre_hook(
      net.point("two"), [&](const Point& p, const std::vector<c10::IValue>& args) {
        pre.push_back({p.name(), {args[0].toTensor().clone()}, args.size()});
      });
  std::vector<at::Tensor> a_args;
  auto h3 = modhooks::register_forward_hook(
      net.point("a"), [&](const Point&, const std::vector<c10::IValue>& args, const c10::IValue&) {
        a_args.push_back(args.at(0).toTensor());
      });
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
      net.point("a"), [](const Point&, const std::vector<c10::IValue>& args) {
        return std::vector<c10::IValue>{args[0].toTensor() * 0};
      });
  std::vector<at::Tensor> a_out;
  auto h4 = modhooks::register_forward_hook(
      net.point("a"), [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        a_out.push_back(out.toTensor().clone());
      });
  net.run(c.inputs());
  ASSERT_EQ(a_out.size(), 1U);
  EXPECT_EQ(a_out[0].sizes(), c.inputs()[0].sizes());  // Linear(8, 8) on the 4 x 8 input
  // Every row is a's bias; from the recorded input the rows would differ.
  EXPECT_TRUE(a_out[0].equal(a_out[0][0].expand_as(a_out[0])));
}

TYPED_TEST_P(Points, KeepKeptOutputsStayValidAfterTheModelReusesItsBuffers) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("resnet18");
  Net net(c.path);
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> kept;  // the tensors themselves
  std::vector<at::Tensor> views;
  std::vector<modhooks::RemovableHandle> handles;
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name),
        [&](const Point& p, const std::vector<c10::IValue>&, const c10::IValue& out) {
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
TYPED_TEST_P(Points, KeepWhatAHookDidToATensorItDroppedIsGoneAtTheNextPoint) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("resnet18");
  Net net(c.path);
  const auto order = c.order();
  for (int what = 0; what < 4; ++what) {
    SCOPED_TRACE("case " + std::to_string(what));
    std::vector<Firing> log;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> weak;
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> weak_storages;
    std::vector<modhooks::ScopedHandle> handles;  // removed before what they capture goes
    for (const auto& name : net.points()) {
      handles.emplace_back(modhooks::register_forward_hook(
          net.point(name),
          [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
            at::Tensor t = leaves(out)[0];
            if (what == 0) weak.emplace_back(t.getIntrusivePtr());
            if (what == 1) weak_storages.push_back(t.storage().getWeakStorageImpl());
            if (what == 2) t._set_neg(true);
            if (what == 3) t.unsqueeze_(0).transpose_(0, 1);
          }));
      // Prepended: each point's record is taken before the hook above changes its tensor.
      handles.emplace_back(modhooks::register_forward_hook(
          net.point(name),
          [&log](const Point& p, const std::vector<c10::IValue>&, const c10::IValue& out) {
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

TYPED_TEST_P(Points, HooksPrependOrderHandlesAndGlobalHooks) {
  MODHOOKS_POINT_TYPES;
  Net net(TypeParam::file("branchy"));
  std::vector<std::string> log;
  auto first = modhooks::register_forward_hook(
      net.point("b"), [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        log.push_back("first");
      });
  auto second = modhooks::register_forward_hook(
      net.point("b"),
      [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        log.push_back("prepended");
      },
      modhooks::ForwardHookOptions().prepend(true));
  auto global = modhooks::register_module_forward_hook(
      [&](const Point& p, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (p.name() == "b") log.push_back("global");
      });
  // An `auto&` global hook is for modules: it does not reach points.
  int generic = 0;
  auto modules_only = modhooks::register_module_forward_hook(
      [&](auto&, const std::vector<c10::IValue>&, const c10::IValue&) { ++generic; });
  Case<TypeParam> c("branchy");
  net.run(c.inputs());
  EXPECT_EQ(log, (std::vector<std::string>{"global", "prepended", "first"}));
  EXPECT_EQ(generic, 0);
  log.clear();
  second.remove();
  global.remove();
  net.run(c.inputs());
  EXPECT_EQ(log, (std::vector<std::string>{"first"}));
}

TYPED_TEST_P(Points, HooksTwoModelsOfOnePackageAreHookedSeparately) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net one(c.path);
  Net two(c.path);
  int fired = 0;
  auto h = modhooks::register_forward_hook(
      one.point("head"),
      [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
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

// As in eager: a hook sees inference tensors in a run inside InferenceMode and normal ones in a
// run outside it, also where the thread's spare aliases were made in the other mode.
TYPED_TEST_P(Points, HooksSeeInferenceTensorsExactlyInRunsInInferenceMode) {
  MODHOOKS_POINT_TYPES;
  std::vector<bool> seen;  // whether each tensor a hook saw was an inference tensor
  std::vector<modhooks::RemovableHandle> handles;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  for (const auto& name : net.points()) {
    handles.push_back(modhooks::register_forward_hook(
        net.point(name),
        [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
          for (const auto& t :
               out.isTensor() ? std::vector<c10::IValue>{out} : out.toTupleRef().elements().vec()) {
            seen.push_back(t.toTensor().is_inference());
          }
        }));
  }
  const auto run = [&](bool inference) {
    seen.clear();
    if (inference) {
      const c10::InferenceMode mode;
      net.run(c.inputs());
    } else {
      net.run(c.inputs());
    }
    return seen;
  };
  const std::vector<bool> normal = run(false);
  ASSERT_FALSE(normal.empty());
  EXPECT_EQ(normal, std::vector<bool>(normal.size(), false));
  EXPECT_EQ(run(true), std::vector<bool>(normal.size(), true));
  EXPECT_EQ(run(false), normal);
}

TYPED_TEST_P(Points, HooksRunsFromSeveralThreadsFireTheirOwnModelsHooks) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  auto shared_net = TypeParam::serving_threads(c.path);
  Net& shared = *shared_net;
  Net other(c.path);
  std::atomic<int> shared_fired{0};
  std::atomic<int> other_fired{0};
  auto h1 = modhooks::register_forward_hook(
      shared.point("head"),
      [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) { ++shared_fired; });
  auto h2 = modhooks::register_forward_hook(
      other.point("head"),
      [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
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
          if (y[0].abs().max().template item<float>() != 0) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(shared_fired.load(), 50);
  EXPECT_EQ(other_fired.load(), 50);
}

// A hook that runs another program (hooked too) and then replaces its own point's output: the
// nested run fires its own points and gives eager's outputs, and the replacement reaches the
// outer run as in eager.
TYPED_TEST_P(Points, HooksAHookThatRunsAnotherProgramThenReplaces) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net outer(c.path);
  Net inner(c.path);
  std::vector<Firing> inner_log;
  auto inner_handles = record_all(inner, inner_log);
  std::vector<at::Tensor> nested;
  auto h = modhooks::register_forward_hook(
      outer.point(c.info["replace"].template get<std::string>()),
      [&](const Point& p, const std::vector<c10::IValue>&, const c10::IValue& out) {
        nested = inner.run(c.inputs());
        return scaled(p, out, 2);
      });
  expect_close(outer.run(c.inputs()), c.outputs("replaced"), "the outer run");
  expect_close(nested, c.outputs(), "the nested run");
  EXPECT_EQ(inner_log.size(), c.order().size());
}

TYPED_TEST_P(Points, ErrorsWrongReplacementNamesThePointAndTheModelStaysUsable) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("b"), [](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
          return out.toTensor().narrow(1, 0, 3);
        }));
    EXPECT_ERROR_WITH(net.run(c.inputs()), ValueError, TypeParam::id("hook.replacement_mismatch"),
                      "a hook on point 'b' replaced output tensor 0 with Float[4, 3] on cpu; the "
                      "compiled graph expects Float[4, 8] on cpu");
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("b"), [](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
          return out.toTensor().to(at::kDouble);
        }));
    EXPECT_ERROR(net.run(c.inputs()), ValueError, TypeParam::id("hook.replacement_mismatch"));
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_hook(
        net.point("two"), [](const Point&, const std::vector<c10::IValue>&,
                             const c10::IValue& out) { return leaves(out)[0]; }));
    EXPECT_ERROR_WITH(net.run(c.inputs()), TypeError, TypeParam::id("hook.bad_replacement"),
                      "the compiled graph holds 2 tensors");
  }
  {
    modhooks::ScopedHandle h(modhooks::register_forward_pre_hook(
        net.point("a"),
        [](const Point&, const std::vector<c10::IValue>&) { return std::vector<c10::IValue>{}; }));
    EXPECT_ERROR(net.run(c.inputs()), TypeError, TypeParam::id("hook.bad_replacement"));
  }
  expect_close(net.run(c.inputs()), c.outputs(), "after the failed runs");
}

/// After a failed run: a run on zeros (the model's buffers then hold other values), then one that
/// gives eager's outputs.
template <class Net, class Kind>
void expect_next_runs_as_eager(Net& net, const Case<Kind>& c) {
  std::vector<at::Tensor> zeros;
  for (const auto& x : c.inputs()) zeros.push_back(at::zeros_like(x));
  net.run(zeros);
  expect_close(net.run(c.inputs()), c.outputs(), "next run");
}

/// Where `point` first fires in eager's order, or -1.
template <class Kind>
int first_firing(const Case<Kind>& c, const std::string& point) {
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

TYPED_TEST_P(Points, KeepACopyThatFailsHalfWayLeavesNoKeptTensorOverTheModelsMemory) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  std::vector<at::Tensor> kept;  // both tensors of `two`, and a view of the second
  std::optional<FailingAllocator> oom;
  auto h = modhooks::register_forward_hook(
      net.point("two"), [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        kept = leaves(out);
        kept.push_back(kept[1].narrow(0, 0, 1));
        oom.emplace(1);  // the first kept tensor's copy succeeds, the second's fails
      });
  try {
    net.run(c.inputs());
    ADD_FAILURE() << "the run did not throw";
  } catch (const modhooks::RuntimeError& e) {
    EXPECT_STREQ(e.id(), TypeParam::id("point.keep_failed").c_str());
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

TYPED_TEST_P(Points, ErrorsHookThatThrowsEndsTheRunWithItsExceptionAndTheNextRunWorks) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  bool raise = true;
  // What a hook kept of the failed run, before the hook after it threw, stays valid.
  std::vector<at::Tensor> kept;
  auto keep = modhooks::register_forward_hook(
      net.point("relu"),
      [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue& out) {
        if (raise) kept.push_back(out.toTensor());
      });
  auto h = modhooks::register_forward_hook(
      net.point("relu"), [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
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

TYPED_TEST_P(Points, ErrorsAHookThatRunsItsOwnProgramWithNoRunnerFreeRaises) {
  MODHOOKS_POINT_TYPES;
  Case<TypeParam> c("branchy");
  Net net(c.path);  // one runner, which the outer run holds
  bool again = true;
  auto h = modhooks::register_forward_hook(
      net.point("relu"), [&](const Point&, const std::vector<c10::IValue>&, const c10::IValue&) {
        if (again) net.run(c.inputs());
      });
  EXPECT_ERROR(net.run(c.inputs()), RuntimeError, TypeParam::id("model.reentrant_run"));
  again = false;
  expect_close(net.run(c.inputs()), c.outputs(), "the next run");
}

TYPED_TEST_P(Points, ErrorsAMovedFromProgramIsAnError) {
  using Net = typename TypeParam::Net;
  Case<TypeParam> c("branchy");
  Net net(c.path);
  Net moved(std::move(net));
  EXPECT_ERROR(net.run(c.inputs()), RuntimeError, TypeParam::id("model.moved_from"));  // NOLINT
  EXPECT_ERROR(net.point("relu"), RuntimeError, TypeParam::id("model.moved_from"));
  EXPECT_ERROR(net.points(), RuntimeError, TypeParam::id("model.moved_from"));
  EXPECT_ERROR(net.path(), RuntimeError, TypeParam::id("model.moved_from"));
  expect_close(moved.run(c.inputs()), c.outputs(), "the model moved to");
}

/// The refusals every kind makes before it runs anything of a file; the kind's own (a file of
/// another format) are in its test file.
TYPED_TEST_P(Points, ErrorsAnAbsentFileOrOneOfAnotherAbiIsRefused) {
  using Net = typename TypeParam::Net;
  EXPECT_ERROR(Net(TypeParam::folder() + "/absent" + TypeParam::extension()), RuntimeError,
               TypeParam::file_id("open_failed"));
  EXPECT_ERROR_WITH(Net(TypeParam::file("other_abi")), RuntimeError,
                    TypeParam::file_id("abi_mismatch"), "exported for the modhooks ABI 9.9");
}

REGISTER_TYPED_TEST_SUITE_P(
    Points, ModelPointsAreTheExportedModulesInGraphOrderWithTheirTypes,
    ModelUnknownPointNamesThePackageAndItsPoints, ModelPackageWithoutPointsHasNone,
    EagerBranchyFiresInEagerOrder, EagerResNet18EverySubmodule, EagerResNet18Blocks,
    EagerVisionTransformer, ReplaceBranchy, ReplaceResNet18, ReplaceResNet18Block,
    ReplaceVisionTransformer, EagerOwnTensors, ReplaceOwnTensorsChangeThatRunOnly,
    ReplaceIdentityOutputReplacedLeavesTheCallersInputAlone,
    HooksAnEditInPlaceIsWhatTheCallerReceivesAndReachesNothingElse,
    NoHooksOutputsBitwiseEqualToThePackageWithoutPoints,
    PreHooksInputPointsShowArgsAndTakeReplacements,
    KeepKeptOutputsStayValidAfterTheModelReusesItsBuffers,
    KeepWhatAHookDidToATensorItDroppedIsGoneAtTheNextPoint, HooksPrependOrderHandlesAndGlobalHooks,
    HooksTwoModelsOfOnePackageAreHookedSeparately,
    HooksSeeInferenceTensorsExactlyInRunsInInferenceMode,
    HooksRunsFromSeveralThreadsFireTheirOwnModelsHooks,
    ErrorsWrongReplacementNamesThePointAndTheModelStaysUsable,
    KeepACopyThatFailsHalfWayLeavesNoKeptTensorOverTheModelsMemory,
    ErrorsHookThatThrowsEndsTheRunWithItsExceptionAndTheNextRunWorks,
    ErrorsAHookThatRunsItsOwnProgramWithNoRunnerFreeRaises, ErrorsAMovedFromProgramIsAnError,
    HooksAHookThatRunsAnotherProgramThenReplaces, ErrorsAnAbsentFileOrOneOfAnotherAbiIsRefused);

}  // namespace point_tests
