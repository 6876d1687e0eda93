// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/nn/call.h: the fast path, argument and result boxing, the accepted
// module spellings, the snapshots each thread keeps between calls.
#include "modhooks/nn/call.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <future>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "nets.h"
#include "test_util.h"

namespace {

using modhooks::ScopedHandle;
using IValues = std::vector<c10::IValue>;

struct MixedImpl : torch::nn::Module {
  std::tuple<at::Tensor, int64_t> forward(const at::Tensor& x, double scale, int64_t count,
                                          const std::string& tag) {
    last_tag = tag;
    return std::make_tuple(x * scale, count + 1);
  }
  std::string last_tag;
};
TORCH_MODULE(Mixed);

struct PairSumImpl : torch::nn::Module {
  at::Tensor forward(const std::vector<at::Tensor>& xs) { return xs.at(0) + xs.at(1); }
};
TORCH_MODULE(PairSum);

struct ThreeInImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    return a + b.sum() + c.sum();
  }
};
TORCH_MODULE(ThreeIn);

struct RecordsInputImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    received = x;
    return x * 2;
  }
  at::Tensor received;
};
TORCH_MODULE(RecordsInput);

TEST(Call, WithoutHooksIsForward) {
  EXPECT_EQ(modhooks::detail::call_hooks_active.load(), 0);
  torch::nn::Linear linear(3, 2);
  auto x = at::randn({4, 3});
  EXPECT_TRUE(at::equal(modhooks::call(linear, x), linear->forward(x)));
  auto out = modhooks::call(linear, x.requires_grad_());
  EXPECT_FALSE(out.is_view());  // no backward wiring without hooks
}

TEST(Call, AcceptsEveryModuleSpelling) {
  torch::nn::Linear holder(3, 2);
  std::shared_ptr<torch::nn::LinearImpl> shared = holder.ptr();
  torch::nn::LinearImpl& ref = *holder;
  int calls = 0;
  ScopedHandle h(modhooks::register_forward_pre_hook(
      shared, [&](torch::nn::Module&, const IValues&) { ++calls; }));
  auto x = at::randn({1, 3});
  modhooks::call(holder, x);
  modhooks::call(shared, x);
  modhooks::call(ref, x);
  EXPECT_EQ(calls, 3);
}

TEST(Call, HooksSeeAndReplaceNonTensorArguments) {
  Mixed m;
  IValues seen;
  ScopedHandle pre(
      modhooks::register_forward_pre_hook(m, [&](torch::nn::Module&, const IValues& args) {
        seen = args;
        IValues replaced = args;
        replaced[1] = 3.0;
        replaced[3] = std::string("replaced");
        return replaced;
      }));
  ScopedHandle post(modhooks::register_forward_hook(
      m, [](torch::nn::Module&, const IValues& args, const c10::IValue& out) {
        EXPECT_EQ(args[2].toInt(), 7);
        const auto& tuple = out.toTupleRef();
        return c10::IValue(c10::ivalue::Tuple::create(
            {tuple.elements().at(0), c10::IValue(tuple.elements().at(1).toInt() * 10)}));
      }));
  auto x = at::ones({2});
  auto [y, n] = modhooks::call(m, x, 2.0, int64_t{7}, std::string("tag"));
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_DOUBLE_EQ(seen[1].toDouble(), 2.0);
  EXPECT_EQ(seen[3].toStringRef(), "tag");
  EXPECT_TRUE(at::allclose(y, at::full({2}, 3.0)));
  EXPECT_EQ(n, 80);
  EXPECT_EQ(m->last_tag, "replaced");
}

TEST(Call, PreHookReturningTheWrongNumberOfArgumentsIsAClearError) {
  torch::nn::Linear linear(2, 2);
  ScopedHandle pre(
      modhooks::register_forward_pre_hook(linear, [](torch::nn::Module&, const IValues& args) {
        return IValues{args[0], args[0]};
      }));
  EXPECT_ERROR_WITH(modhooks::call(linear, at::randn({1, 2})), TypeError,
                    "nn.hook.bad_argument_count",
                    "forward pre-hook returned 2 arguments, but forward takes 1");
}

TEST(Call, ForwardHookReturningTheWrongTypeIsAClearError) {
  torch::nn::Linear linear(2, 2);
  ScopedHandle post(modhooks::register_forward_hook(
      linear, [](torch::nn::Module&, const IValues&, const c10::IValue&) {
        return c10::IValue(int64_t{1});
      }));
  EXPECT_ERROR_WITH(modhooks::call(linear, at::randn({1, 2})), TypeError, "nn.hook.bad_replacement",
                    "Tensor");
}

TEST(Call, FastPathCounterFollowsRegistrationAndModuleDeath) {
  EXPECT_EQ(modhooks::detail::call_hooks_active.load(), 0);
  {
    torch::nn::Linear linear(2, 2);
    auto h = modhooks::register_forward_hook(
        linear, [](torch::nn::Module&, const IValues&, const c10::IValue&) {});
    EXPECT_EQ(modhooks::detail::call_hooks_active.load(), 1);
    h.remove();
    EXPECT_EQ(modhooks::detail::call_hooks_active.load(), 0);
    modhooks::register_forward_hook(linear,
                                    [](torch::nn::Module&, const IValues&, const c10::IValue&) {});
  }
  // The dead module's tables are dropped the next time its address is looked up or swept;
  // registering on many modules sweeps them.
  for (int i = 0; i < 200; ++i) {
    torch::nn::Linear tmp(1, 1);
    modhooks::register_forward_hook(tmp,
                                    [](torch::nn::Module&, const IValues&, const c10::IValue&) {});
  }
  torch::nn::Linear last(1, 1);
  modhooks::register_forward_hook(last, [](torch::nn::Module&, const IValues&, const c10::IValue&) {
  }).remove();
  EXPECT_LT(modhooks::detail::call_hooks_active.load(), 200);
}

// Forward hooks see forward's tensors without a reference count of their own (borrowed): the
// counts must come out as they went in, whatever the hooks keep or replace.
TEST(Call, ForwardHooksLeaveReferenceCountsAsTheyFoundThem) {
  torch::nn::Identity identity;
  at::Tensor x = at::randn({2});
  const auto before = x.use_count();
  IValues kept_args;
  c10::IValue kept_output;
  {
    ScopedHandle look(modhooks::register_forward_hook(
        identity, [&](torch::nn::Module&, const IValues& args, const c10::IValue& out) {
          EXPECT_EQ(args.size(), 1u);
          EXPECT_TRUE(args[0].toTensor().is_same(x));
          EXPECT_TRUE(out.toTensor().is_same(x));
        }));
    modhooks::call(identity, x);
    EXPECT_EQ(x.use_count(), before);
    ScopedHandle keep(modhooks::register_forward_hook(
        identity, [&](torch::nn::Module&, const IValues& args, const c10::IValue& out) {
          kept_args = args;  // copies take their own references
          kept_output = out;
        }));
    at::Tensor y = modhooks::call(identity, x);
    EXPECT_EQ(x.use_count(), before + 3);  // y, kept_args[0], kept_output
  }
  kept_args.clear();
  kept_output = c10::IValue();
  EXPECT_EQ(x.use_count(), before);
}

TEST(Call, ForwardHooksReplacingTheOutputReleaseNothingTwice) {
  torch::nn::Identity identity;
  at::Tensor x = at::randn({2});
  at::Tensor replacement = at::ones({2});
  const auto x_count = x.use_count();
  const auto replacement_count = replacement.use_count();
  std::vector<bool> saw_replacement;
  ScopedHandle first(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        return c10::IValue(replacement);
      }));
  ScopedHandle second(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues&, const c10::IValue& out) {
        saw_replacement.push_back(out.toTensor().is_same(replacement));
      }));
  for (int i = 0; i < 3; ++i) {
    at::Tensor y = modhooks::call(identity, x);
    EXPECT_TRUE(y.is_same(replacement));
  }
  EXPECT_EQ(saw_replacement, std::vector<bool>(3, true));
  EXPECT_EQ(x.use_count(), x_count);
  EXPECT_EQ(replacement.use_count(), replacement_count);
}

// The thread's vector of shown arguments keeps the last call's size between calls: each call
// must see its own number of arguments, and what was boxed for the hooks (a tensor list copies
// its tensors, a tuple output its elements) must be released when the call ends.
TEST(Call, ArgumentsShownToHooksFitEachCallAndAreReleasedAfterIt) {
  torch::nn::Identity one;
  Mixed four;
  PairSum pair;
  at::Tensor a = at::randn({2});
  at::Tensor b = at::randn({2});
  const auto a_count = a.use_count();
  std::vector<std::size_t> sizes;
  auto record = [&](torch::nn::Module&, const IValues& args, const c10::IValue&) {
    sizes.push_back(args.size());
  };
  ScopedHandle on_one(modhooks::register_forward_hook(one, record));
  ScopedHandle on_four(modhooks::register_forward_hook(four, record));
  ScopedHandle on_pair(modhooks::register_forward_hook(pair, record));
  for (int i = 0; i < 2; ++i) {
    modhooks::call(one, a);
    auto [y, n] = modhooks::call(four, a, 2.0, int64_t{1}, std::string("tag"));
    EXPECT_EQ(y.use_count(), 1);  // the output tuple shown to the hook is gone
    EXPECT_EQ(n, 2);
    modhooks::call(pair, std::vector<at::Tensor>{a, b});
    EXPECT_EQ(a.use_count(), a_count);  // the argument list shown to the hook is gone
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{1, 4, 1, 1, 4, 1}));
}

// A hook that runs another hooked module: the inner call's arguments must not disturb the outer
// call's, though both reuse the thread's argument buffer.
TEST(Call, AHookedCallInsideAHookKeepsTheOuterArguments) {
  torch::nn::Identity outer;
  torch::nn::Identity inner;
  at::Tensor x = at::randn({2});
  at::Tensor z = at::randn({3});
  std::vector<bool> outer_saw_x;
  ScopedHandle on_inner(modhooks::register_forward_hook(
      inner, [&](torch::nn::Module&, const IValues& args, const c10::IValue&) {
        EXPECT_TRUE(args[0].toTensor().is_same(z));
      }));
  ScopedHandle on_outer(modhooks::register_forward_hook(
      outer, [&](torch::nn::Module&, const IValues& args, const c10::IValue&) {
        modhooks::call(inner, z);
        outer_saw_x.push_back(args[0].toTensor().is_same(x));
      }));
  modhooks::call(outer, x);
  modhooks::call(outer, x);
  EXPECT_EQ(outer_saw_x, std::vector<bool>(2, true));
}

TEST(Call, ForwardHooksSeeTheArgumentsTheBackwardWiringGaveForward) {
  // As Python's `_call_impl`: with full backward hooks, forward receives the inputs wrapped in the
  // wiring's node, and forward hooks see those, not the caller's.
  RecordsInput module;
  int seen = 0;
  ScopedHandle backward(modhooks::register_full_backward_hook(
      module, [](torch::nn::Module&, const modhooks::TensorList&, const modhooks::TensorList&) {}));
  ScopedHandle forward(modhooks::register_forward_hook(
      module, [&](torch::nn::Module&, const IValues& args, const c10::IValue&) {
        ASSERT_EQ(args.size(), 1u);
        EXPECT_TRUE(args[0].toTensor().is_same(module->received));
        ++seen;
      }));
  const at::Tensor x = at::randn({3}).requires_grad_();
  modhooks::call(module, x);
  EXPECT_FALSE(module->received.is_same(x));
  EXPECT_EQ(seen, 1);
}

TEST(Call, AlwaysCalledHooksSeeTheOutputAnEarlierHookRaisedOn) {
  torch::nn::Identity identity;
  at::Tensor x = at::randn({2});
  const auto before = x.use_count();
  std::vector<bool> saw_x;
  ScopedHandle raises(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        throw std::runtime_error("hook failed");
      }));
  ScopedHandle always(modhooks::register_forward_hook(
      identity,
      [&](torch::nn::Module&, const IValues& args, const c10::IValue& out) {
        saw_x.push_back(args[0].toTensor().is_same(x) && out.toTensor().is_same(x));
      },
      modhooks::ForwardHookOptions().always_call(true)));
  EXPECT_THROW(modhooks::call(identity, x), std::runtime_error);
  EXPECT_EQ(saw_x, std::vector<bool>{true});
  EXPECT_EQ(x.use_count(), before);
}

TEST(Call, EachCallRunsTheKindsOfHooksTheModuleHasNow) {
  // A call reads which kinds of hooks its module has from one word that the module's lists keep
  // together: each registration and removal shows in the next call, whichever list it edits.
  torch::nn::Identity identity;
  const at::Tensor x = at::randn({2});
  std::vector<std::string> ran;
  ScopedHandle plain(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        ran.emplace_back("forward");
      }));
  {
    ScopedHandle pre(modhooks::register_forward_pre_hook(
        identity, [&](torch::nn::Module&, const IValues&) { ran.emplace_back("pre"); }));
    modhooks::call(identity, x);
    EXPECT_EQ(ran, (std::vector<std::string>{"pre", "forward"}));
  }
  ran.clear();
  modhooks::call(identity, x);
  EXPECT_EQ(ran, std::vector<std::string>{"forward"});
  ran.clear();
  ScopedHandle raises(modhooks::register_forward_hook(
      identity,
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        ran.emplace_back("raises");
        throw std::runtime_error("hook failed");
      },
      modhooks::ForwardHookOptions().prepend(true)));
  {
    ScopedHandle always(modhooks::register_forward_hook(
        identity,
        [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ran.emplace_back("always"); },
        modhooks::ForwardHookOptions().always_call(true)));
    EXPECT_THROW(modhooks::call(identity, x), std::runtime_error);
    EXPECT_EQ(ran, (std::vector<std::string>{"raises", "always"}));
  }
  ran.clear();
  EXPECT_THROW(modhooks::call(identity, x), std::runtime_error);
  EXPECT_EQ(ran, std::vector<std::string>{"raises"});
}

TEST(Call, CallsOfAModuleNestedInItsOwnHooksEachSeeTheirOwnArguments) {
  // Each level of nested hooked calls shows its arguments in a vector of its own: the outermost
  // in its slot of the thread's cache, the ones inside it, which find that slot in use, in
  // vectors of their own.
  torch::nn::Identity identity;
  constexpr int kDepth = 12;
  std::vector<at::Tensor> passed;
  int depth = 0;
  int checked = 0;
  const auto check = [&](const IValues& args) {
    EXPECT_TRUE(args.at(0).toTensor().is_same(passed.at(static_cast<std::size_t>(depth))))
        << "depth " << depth;
    ++checked;
  };
  ScopedHandle pre(modhooks::register_forward_pre_hook(
      identity, [&](torch::nn::Module&, const IValues& args) { check(args); }));
  ScopedHandle post(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues& args, const c10::IValue&) {
        if (depth + 1 < kDepth) {
          ++depth;
          passed.push_back(at::randn({depth}));
          modhooks::call(identity, passed.back());
          passed.pop_back();
          --depth;
        }
        check(args);  // after the deeper calls, still this level's arguments
      }));
  for (int round = 0; round < 2; ++round) {
    passed = {at::randn({3})};
    modhooks::call(identity, passed.back());
  }
  EXPECT_EQ(checked, 2 * 2 * kDepth);
}

// Each thread keeps the snapshots of the modules it called last (nn's call cache). What it
// keeps must never change what a call runs, nor keep a removed hook alive past the points below.

/// A forward hook that counts its calls and holds `token`, so that a test can tell when the hook
/// itself is destroyed.
modhooks::RemovableHandle counting_hook(torch::nn::Module& module, int& calls,
                                        const std::shared_ptr<int>& token) {
  return modhooks::register_forward_hook(
      module, [&calls, token](torch::nn::Module&, const IValues&, const c10::IValue&) { ++calls; });
}

/// Two modules with a counting hook each; `token` is held by `identity`'s hook alone.
struct TwoHookedModules {
  torch::nn::Identity identity;
  torch::nn::Identity other;
  int calls = 0;
  int other_calls = 0;
  std::shared_ptr<int> token = std::make_shared<int>(0);
  ScopedHandle on_other{counting_hook(*other, other_calls, std::make_shared<int>(0))};
  modhooks::RemovableHandle handle{counting_hook(*identity, calls, token)};
};

TEST(CallSnapshots, AHookRemovedOnTheCallingThreadDiesAtItsRemoval) {
  TwoHookedModules m;
  modhooks::call(m.identity, at::randn({2}));
  modhooks::call(m.identity, at::randn({2}));
  EXPECT_EQ(m.calls, 2);
  m.handle.remove();
  EXPECT_EQ(m.token.use_count(), 1);  // neither the list nor this thread's snapshots hold it
  modhooks::call(m.identity, at::randn({2}));
  modhooks::call(m.other, at::randn({2}));
  EXPECT_EQ(m.calls, 2);
  EXPECT_EQ(m.other_calls, 1);
}

TEST(CallSnapshots, AHookThatRemovesItselfDiesWhenItsCallEnds) {
  torch::nn::Identity identity;
  int calls = 0;
  auto token = std::make_shared<int>(0);
  auto handle = std::make_shared<modhooks::RemovableHandle>();
  *handle = modhooks::register_forward_hook(
      identity, [&calls, token, handle](torch::nn::Module&, const IValues&, const c10::IValue&) {
        ++calls;
        handle->remove();
      });
  std::weak_ptr<modhooks::RemovableHandle> handle_alive = handle;
  handle.reset();  // the hook owns its handle now
  modhooks::call(identity, at::randn({2}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_TRUE(handle_alive.expired());
  modhooks::call(identity, at::randn({2}));
  EXPECT_EQ(calls, 1);
}

TEST(CallSnapshots, AnotherThreadLetsGoOfARemovedHookAtItsNextHookedCallOrItsEnd) {
  TwoHookedModules m;
  std::promise<void> called;
  std::promise<void> removed;
  std::promise<void> called_again;
  std::promise<void> finish;
  std::thread worker([&] {
    modhooks::call(m.identity, at::randn({2}));
    called.set_value();
    removed.get_future().wait();
    modhooks::call(m.other, at::randn({2}));  // any hooked call lets go of the stale snapshots
    called_again.set_value();
    finish.get_future().wait();
    modhooks::call(m.identity, at::randn({2}));
  });
  called.get_future().wait();
  m.handle.remove();
  removed.set_value();
  called_again.get_future().wait();
  EXPECT_EQ(m.token.use_count(), 1);
  finish.set_value();
  worker.join();
  EXPECT_EQ(m.calls, 1);
  EXPECT_EQ(m.other_calls, 1);

  // A thread that ends lets go of everything it kept.
  auto kept = std::make_shared<int>(0);
  auto on_identity = counting_hook(*m.identity, m.calls, kept);
  std::thread([&] { modhooks::call(m.identity, at::randn({2})); }).join();
  EXPECT_EQ(m.calls, 2);
  on_identity.remove();
  EXPECT_EQ(kept.use_count(), 1);
}

TEST(CallSnapshots, ModulesThatShareACacheSlotEachRunTheirOwnHooks) {
  // More modules than the cache has slots, called in two orders: many pairs share a slot, and
  // each call must run its own module's hooks (and a pre-hook on every third one).
  constexpr int kModules = 600;
  std::vector<torch::nn::Identity> modules(kModules);
  std::vector<int> seen;
  std::vector<ScopedHandle> handles;
  for (int i = 0; i < kModules; ++i) {
    handles.emplace_back(modhooks::register_forward_hook(
        modules[i],
        [&seen, i](torch::nn::Module&, const IValues&, const c10::IValue&) { seen.push_back(i); }));
    if (i % 3 == 0) {
      handles.emplace_back(modhooks::register_forward_pre_hook(
          modules[i], [&seen, i](torch::nn::Module&, const IValues&) { seen.push_back(-i - 1); }));
    }
  }
  std::vector<int> expected;
  const at::Tensor x = at::randn({2});
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < kModules; ++k) {
      const int i = round == 0 ? k : kModules - 1 - k;
      modhooks::call(modules[i], x);
      if (i % 3 == 0) expected.push_back(-i - 1);
      expected.push_back(i);
    }
  }
  EXPECT_EQ(seen, expected);
}

TEST(CallSnapshots, ModulesOfOtherAritiesThatShareACacheSlotEachSeeTheirOwnArguments) {
  // A slot's vector of shown arguments is kept at the size of its last call: modules taking one,
  // two and three tensors share slots (more modules than slots), and each call's hooks must see
  // exactly its own arguments.
  constexpr int kModules = 600;
  std::vector<torch::nn::Identity> ones;
  std::vector<testnets::TwoOut> twos;
  std::vector<ThreeIn> threes;
  std::vector<ScopedHandle> handles;
  const std::vector<at::Tensor> x{at::randn({1}), at::randn({2}), at::randn({3})};
  std::size_t expected_size = 0;
  int checked = 0;
  const auto check = [&](const IValues& args) {
    ASSERT_EQ(args.size(), expected_size);
    for (std::size_t i = 0; i < args.size(); ++i) EXPECT_TRUE(args[i].toTensor().is_same(x[i]));
    ++checked;
  };
  const auto hook = [&](auto& module) {
    handles.emplace_back(modhooks::register_forward_pre_hook(
        module, [&](torch::nn::Module&, const IValues& args) { check(args); }));
    handles.emplace_back(modhooks::register_forward_hook(
        module, [&](torch::nn::Module&, const IValues& args, const c10::IValue&) { check(args); }));
  };
  for (int i = 0; i < kModules / 3; ++i) {
    hook(ones.emplace_back());
    hook(twos.emplace_back());
    hook(threes.emplace_back());
  }
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < kModules / 3; ++k) {
      const auto i = static_cast<std::size_t>(round == 0 ? k : kModules / 3 - 1 - k);
      expected_size = 1;
      modhooks::call(ones[i], x[0]);
      expected_size = 2;
      modhooks::call(twos[i], x[0], x[1]);
      expected_size = 3;
      modhooks::call(threes[i], x[0], x[1], x[2]);
    }
  }
  EXPECT_EQ(checked, 2 * 2 * kModules);
}

TEST(CallSnapshots, AModuleCalledInsideItsOwnHookKeepsTheOuterCallsSnapshot) {
  // The outer call's snapshot is pinned while it runs: a hook that registers another hook and
  // then calls the module again gets the new hook in the inner call only, and the outer call
  // goes on with the hooks it started with.
  torch::nn::Identity identity;
  std::vector<std::string> ran;
  int depth = 0;
  std::vector<ScopedHandle> handles;
  const auto record = [&](const std::string& name) { ran.push_back(name + std::to_string(depth)); };
  handles.emplace_back(modhooks::register_forward_pre_hook(
      identity, [&](torch::nn::Module&, const IValues&) { record("pre"); }));
  handles.emplace_back(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues& args, const c10::IValue& out) {
        record("post");
        EXPECT_TRUE(out.toTensor().is_same(args[0].toTensor()));
        if (depth > 0) return;
        if (handles.size() == 3) {
          handles.emplace_back(modhooks::register_forward_hook(
              identity,
              [&](torch::nn::Module&, const IValues&, const c10::IValue&) { record("late"); }));
        }
        ++depth;
        modhooks::call(identity, at::randn({1}));
        --depth;
      }));
  handles.emplace_back(modhooks::register_forward_hook(
      identity, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { record("second"); }));
  modhooks::call(identity, at::randn({3}));
  EXPECT_EQ(ran, (std::vector<std::string>{"pre0", "post0", "pre1", "post1", "second1", "late1",
                                           "second0"}));
  ran.clear();
  modhooks::call(identity, at::randn({3}));
  EXPECT_EQ(ran, (std::vector<std::string>{"pre0", "post0", "pre1", "post1", "second1", "late1",
                                           "second0", "late0"}));
}

TEST(CallSnapshots, CallsOnSeveralThreadsWhileAnotherThreadRegistersAndRemovesHooks) {
  // Three threads call one module (and one of their own) through `call` while a fourth adds and
  // removes forward hooks and pre-hooks on it: every call runs the standing hook once on its own
  // arguments, and the threads' snapshots follow the edits (TSan runs this test).
  torch::nn::Identity shared;
  std::atomic<int> standing{0};
  std::atomic<int> transient{0};
  ScopedHandle on_shared(modhooks::register_forward_hook(
      shared, [&](torch::nn::Module&, const IValues& args, const c10::IValue& output) {
        // Identity returns its input: the args shown are this call's, not another thread's.
        EXPECT_TRUE(args.at(0).toTensor().is_same(output.toTensor()));
        ++standing;
      }));
  constexpr int kThreads = 3;
  constexpr int kCalls = 2000;
  std::atomic<bool> done{false};
  std::thread editor([&] {
    while (!done.load()) {
      ScopedHandle post(modhooks::register_forward_hook(
          shared, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++transient; }));
      ScopedHandle pre(modhooks::register_forward_pre_hook(
          shared, [&](torch::nn::Module&, const IValues&) { ++transient; }));
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> callers;
  std::vector<int> own_calls(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      torch::nn::Identity own;
      ScopedHandle on_own(modhooks::register_forward_hook(
          own, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++own_calls[t]; }));
      const at::Tensor x = at::randn({2});
      for (int i = 0; i < kCalls; ++i) {
        EXPECT_TRUE(modhooks::call(shared, x).is_same(x));
        modhooks::call(own, x);
      }
    });
  }
  for (auto& caller : callers) caller.join();
  done = true;
  editor.join();
  EXPECT_EQ(standing.load(), kThreads * kCalls);
  EXPECT_EQ(own_calls, std::vector<int>(kThreads, kCalls));
  const int after = transient.load();
  modhooks::call(shared, at::randn({2}));
  EXPECT_EQ(transient.load(), after);  // the editor's last hooks are gone
}

TEST(Call, AHookThatDropsTheModulesLastOwnerLeavesItAliveUntilTheCallReturns) {
  // Python's `_call_impl` holds `self`: a pre-hook that drops the last owner (here the holder the
  // caller named) must leave forward and the forward hooks on a live module, which dies when the
  // call returns. Each spelling `call` takes: a holder, a shared_ptr, the module by reference.
  const at::Tensor x = at::randn({2, 4});
  for (const char* spelling : {"holder", "shared_ptr", "reference"}) {
    SCOPED_TRACE(spelling);
    auto owner = std::make_unique<torch::nn::Linear>(4, 3);
    const std::weak_ptr<torch::nn::Module> watch = owner->ptr();
    const at::Tensor expected = (*owner)->forward(x);
    bool alive_in_forward_hook = false;
    ScopedHandle drop(modhooks::register_forward_pre_hook(
        *owner, [&](torch::nn::Module&, const IValues&) { owner.reset(); }));
    ScopedHandle look(modhooks::register_forward_hook(
        *owner, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
          alive_in_forward_hook = !watch.expired();
        }));
    at::Tensor y;
    const std::string which = spelling;
    if (which == "holder") {
      y = modhooks::call(*owner, x);
    } else if (which == "shared_ptr") {
      y = modhooks::call(owner->ptr(), x);
    } else {
      y = modhooks::call(**owner, x);
    }
    EXPECT_TRUE(alive_in_forward_hook);
    EXPECT_TRUE(watch.expired());  // it died when the call returned
    EXPECT_TRUE(y.equal(expected));
  }
}

TEST(CallSnapshots, AModuleBuiltWhereAHookedOneDiedRunsNoneOfItsHooks) {
  // Another module keeps hooks registered, so calls leave the fast path; a module built at a
  // dead one's address must not be served the dead one's snapshots. Both are built in one piece
  // of storage, whatever the allocator would do.
  torch::nn::Identity keeps_hooks_on;
  ScopedHandle on_it(modhooks::register_forward_hook(
      keeps_hooks_on, [](torch::nn::Module&, const IValues&, const c10::IValue&) {}));
  using Impl = torch::nn::IdentityImpl;
  alignas(Impl) std::array<std::byte, sizeof(Impl)> storage{};
  const auto build = [&] {
    return std::shared_ptr<Impl>(new (storage.data()) Impl(), [](Impl* m) { m->~Impl(); });
  };
  int calls = 0;
  const at::Tensor x = at::randn({2});
  {
    std::shared_ptr<Impl> dead = build();
    modhooks::register_forward_hook(
        dead, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++calls; });
    modhooks::call(dead, x);
    EXPECT_EQ(calls, 1);
  }
  std::shared_ptr<Impl> born = build();
  modhooks::call(born, x);
  EXPECT_EQ(calls, 1);
}
}  // namespace

TEST(Call, AReplacementForwardCannotHoldNamesTheHookAndTheModule) {
  torch::nn::Linear linear(2, 2);
  modhooks::ScopedHandle post(modhooks::register_forward_hook(
      linear, [](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue&) {
        return c10::IValue(3);
      }));
  const std::string message = expect_error<modhooks::TypeError>(
      [&] {
        modhooks::call(linear, at::randn({1, 2}));
      },
      "nn.hook.bad_replacement");
  EXPECT_NE(message.find("forward hook of module Linear"), std::string::npos) << message;
  modhooks::ScopedHandle pre(modhooks::register_forward_pre_hook(
      linear, [](torch::nn::Module&, const std::vector<c10::IValue>&) {
        return std::vector<c10::IValue>{c10::IValue("text")};
      }));
  const std::string pre_message = expect_error<modhooks::TypeError>(
      [&] {
        modhooks::call(linear, at::randn({1, 2}));
      },
      "nn.hook.bad_replacement");
  EXPECT_NE(pre_message.find("forward pre-hook of module Linear"), std::string::npos)
      << pre_message;
}
