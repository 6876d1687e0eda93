// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/register.h: forward pre-hooks, forward hooks and the global
// variants, ported from PyTorch's test/nn/test_module_hooks.py (scenarios 1, 2, 5, 8, 20, 23-26,
// 40 as the maintainers' semantics notes number them; those notes are not part of this
// repository).
#include "modhooks/register.h"

#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "nets.h"
#include "test_util.h"

namespace {

using modhooks::ForwardHookOptions;
using modhooks::RemovableHandle;
using modhooks::ScopedHandle;
using IValues = std::vector<c10::IValue>;

TEST(ForwardHooks, FireInPrependOrderOnlyDuringForward) {
  // Scenario 1: hooks 0, 1 (prepend), 2, 3, 4 (prepend) on net1.seq2 fire as [4, 1, 0, 2, 3].
  testnets::ToyModel model;
  std::vector<int> fired;
  std::vector<ScopedHandle> handles;
  const bool prepend[] = {false, true, false, false, true};
  for (int i = 0; i < 5; ++i) {
    handles.emplace_back(modhooks::register_forward_hook(
        model->net1->seq2,
        [&, i](torch::nn::Module& m, const IValues& args, const c10::IValue&) {
          EXPECT_EQ(args.size(), 1u);
          EXPECT_EQ(&m, model->net1->seq2.get());
          fired.push_back(i);
        },
        ForwardHookOptions().prepend(prepend[i])));
  }
  for (int iteration = 0; iteration < 2; ++iteration) {
    auto x = at::randn({2, 10}).requires_grad_();
    auto out = std::get<0>(modhooks::call(model, x));
    out.sum().backward();
  }
  EXPECT_EQ(fired, (std::vector<int>{4, 1, 0, 2, 3, 4, 1, 0, 2, 3}));
}

TEST(ForwardPreHooks, FireInPrependOrder) {
  // Scenario 2: 0 (prepend), 1, 2, 3, 4 (prepend) on net2.seq1 fire as [4, 0, 1, 2, 3].
  testnets::ToyModel model;
  std::vector<int> fired;
  std::vector<ScopedHandle> handles;
  const bool prepend[] = {true, false, false, false, true};
  for (int i = 0; i < 5; ++i) {
    handles.emplace_back(modhooks::register_forward_pre_hook(
        model->net2->seq1, [&, i](torch::nn::Module&, const IValues&) { fired.push_back(i); },
        ForwardHookOptions().prepend(prepend[i])));
  }
  modhooks::call(model, at::randn({2, 10}));
  EXPECT_EQ(fired, (std::vector<int>{4, 0, 1, 2, 3}));
}

TEST(ForwardHooks, WriteableArgsAndOutput) {
  // Scenario 40: a pre-hook returning relu(input) and a forward hook returning -output.
  torch::nn::Sigmoid sigmoid;
  auto x = at::randn({5, 5}).requires_grad_();
  ScopedHandle pre(
      modhooks::register_forward_pre_hook(sigmoid, [](torch::nn::Module&, const IValues& args) {
        return IValues{at::relu(args[0].toTensor())};
      }));
  ScopedHandle post(modhooks::register_forward_hook(
      sigmoid, [](torch::nn::Module&, const IValues&, const c10::IValue& out) {
        return c10::IValue(-out.toTensor());
      }));
  auto y = modhooks::call(sigmoid, x);
  EXPECT_TRUE(at::allclose(y, -at::sigmoid(at::relu(x))));
  y.sum().backward();
  auto s = at::sigmoid(at::relu(x.detach()));
  auto expected = -s * (1 - s) * (x.detach() > 0);
  EXPECT_TRUE(at::allclose(x.grad(), expected));
}

TEST(GlobalHooks, WriteableAndRunForEveryModule) {
  // Scenarios 20 and 23: global hooks fire for every module and may rewrite args and output.
  torch::nn::Sigmoid a, b, c;
  int forwards = 0;
  ScopedHandle count(modhooks::register_module_forward_hook(
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++forwards; }));
  auto x = at::randn({3});
  modhooks::call(a, x);
  modhooks::call(b, x);
  modhooks::call(c, x);
  EXPECT_EQ(forwards, 3);
  {
    ScopedHandle pre(
        modhooks::register_module_forward_pre_hook([](torch::nn::Module&, const IValues& args) {
          return IValues{at::relu(args[0].toTensor())};
        }));
    ScopedHandle neg(modhooks::register_module_forward_hook(
        [](torch::nn::Module&, const IValues&, const c10::IValue& out) {
          return c10::IValue(-out.toTensor());
        }));
    EXPECT_TRUE(at::allclose(modhooks::call(a, x), -at::sigmoid(at::relu(x))));
  }
  EXPECT_TRUE(at::allclose(modhooks::call(a, x), at::sigmoid(x)));
  EXPECT_EQ(forwards, 5);
}

TEST(GlobalHooks, RunBeforeModuleHooksWhateverThePrepend) {
  // Scenario 26 plus prepend: a module hook registered with prepend still runs after globals.
  torch::nn::Sigmoid m;
  std::vector<std::string> order;
  ScopedHandle local_pre(modhooks::register_forward_pre_hook(
      m, [&](torch::nn::Module&, const IValues&) { order.push_back("local pre"); },
      ForwardHookOptions().prepend(true)));
  ScopedHandle global_pre(modhooks::register_module_forward_pre_hook(
      [&](torch::nn::Module&, const IValues&) { order.push_back("global pre"); }));
  ScopedHandle local_fwd(modhooks::register_forward_hook(
      m, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { order.push_back("local"); },
      ForwardHookOptions().prepend(true)));
  ScopedHandle global_fwd(modhooks::register_module_forward_hook(
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) { order.push_back("global"); }));
  ScopedHandle local_bwd(modhooks::register_full_backward_hook(
      m,
      [&](torch::nn::Module&, const modhooks::TensorList&, const modhooks::TensorList&) {
        order.push_back("local backward");
      },
      /*prepend=*/true));
  ScopedHandle global_bwd(modhooks::register_module_full_backward_hook(
      [&](torch::nn::Module&, const modhooks::TensorList&, const modhooks::TensorList&) {
        order.push_back("global backward");
      }));
  modhooks::call(m, at::randn({2}).requires_grad_()).sum().backward();
  EXPECT_EQ(order, (std::vector<std::string>{"global pre", "local pre", "global", "local",
                                             "global backward", "local backward"}));
}

TEST(ForwardHooks, HooksMayRemoveThemselvesWhileRunning) {
  // Scenarios 24 and 25: each hook removes its own handle; both still run once.
  torch::nn::Sigmoid m;
  int calls = 0;
  auto h1 = std::make_shared<RemovableHandle>();
  auto h2 = std::make_shared<RemovableHandle>();
  *h1 = modhooks::register_forward_pre_hook(m, [&, h1](torch::nn::Module&, const IValues&) {
    ++calls;
    h1->remove();
  });
  *h2 = modhooks::register_forward_hook(
      m, [&, h2](torch::nn::Module&, const IValues&, const c10::IValue&) {
        ++calls;
        h2->remove();
      });
  auto x = at::randn({3});
  EXPECT_TRUE(at::allclose(modhooks::call(m, x), at::sigmoid(x)));
  modhooks::call(m, x);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(modhooks::detail::hooks_for(*m)->forward.size(), 0u);
  EXPECT_EQ(modhooks::detail::hooks_for(*m)->forward_pre.size(), 0u);
}

TEST(ForwardHooks, AHookMayRemoveAnotherMidDispatchWhichStillRunsThisTime) {
  torch::nn::Sigmoid m;
  std::vector<int> fired;
  RemovableHandle second;
  ScopedHandle first(modhooks::register_forward_hook(
      m, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        fired.push_back(1);
        second.remove();
      }));
  second = modhooks::register_forward_hook(
      m, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { fired.push_back(2); });
  modhooks::call(m, at::randn({1}));
  modhooks::call(m, at::randn({1}));
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 1}));
}

TEST(ForwardHooks, AlwaysCalledHooksRunOnErrors) {
  // Scenario 8.
  testnets::Fails m;
  std::vector<int> stack;
  RemovableHandle pre = modhooks::register_forward_pre_hook(
      m, [&](torch::nn::Module&, const IValues&) { stack.push_back(2); });
  RemovableHandle always = modhooks::register_forward_hook(
      m, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { stack.push_back(-1); },
      ForwardHookOptions().always_call(true));
  auto x = at::randn({1});
  EXPECT_THROWS_WITH(modhooks::call(m, x, true), "failing in forward");
  EXPECT_EQ(stack, (std::vector<int>{2, -1}));
  stack.clear();
  modhooks::call(m, x, false);
  EXPECT_EQ(stack, (std::vector<int>{2, -1}));  // once, not twice

  pre.remove();
  pre = modhooks::register_forward_pre_hook(m, [&](torch::nn::Module&, const IValues&) {
    stack.push_back(2);
    throw std::runtime_error("failing in ctx setup");
  });
  stack.clear();
  EXPECT_THROWS_WITH(modhooks::call(m, x, false), "failing in ctx setup");
  EXPECT_EQ(stack, (std::vector<int>{2, -1}));

  // A prepended always hook that raises itself: the original error still propagates and the
  // other always hook still runs.
  RemovableHandle raising = modhooks::register_forward_hook(
      m,
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        stack.push_back(-2);
        throw std::runtime_error("always hook failed");
      },
      ForwardHookOptions().always_call(true).prepend(true));
  stack.clear();
  EXPECT_THROWS_WITH(modhooks::call(m, x, false), "failing in ctx setup");
  EXPECT_EQ(stack, (std::vector<int>{2, -2, -1}));

  // The global form behaves the same.
  RemovableHandle global = modhooks::register_module_forward_hook(
      [&](torch::nn::Module&, const IValues&, const c10::IValue&) { stack.push_back(-3); },
      ForwardHookOptions().always_call(true));
  stack.clear();
  EXPECT_THROWS_WITH(modhooks::call(m, x, false), "failing in ctx setup");
  EXPECT_EQ(stack, (std::vector<int>{2, -3, -2, -1}));
  for (auto* h : {&pre, &always, &raising, &global}) h->remove();
  EXPECT_EQ(modhooks::detail::hooks_for(*m)->forward.size(), 0u);
}

TEST(ForwardHooks, AHookThatThrowsPropagatesAndLeavesTheRegistryIntact) {
  torch::nn::Sigmoid m;
  int calls = 0;
  ScopedHandle bad(modhooks::register_forward_hook(
      m, [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
        ++calls;
        throw std::runtime_error("hook failed");
      }));
  ScopedHandle counter(
      modhooks::register_forward_pre_hook(m, [&](torch::nn::Module&, const IValues&) { ++calls; }));
  EXPECT_THROWS_WITH(modhooks::call(m, at::randn({1})), "hook failed");
  EXPECT_THROWS_WITH(modhooks::call(m, at::randn({1})), "hook failed");
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(modhooks::detail::hooks_for(*m)->forward.size(), 1u);
}

namespace {
/// A Linear built in one buffer, the same each time, and owned by a shared_ptr whose control
/// block is allocated apart (as `std::shared_ptr<T>(new T)` does): a module built after another
/// died sits at the dead one's address while the dead one's control block, which a weak
/// reference keeps, lives on. At most one at a time.
alignas(torch::nn::LinearImpl) unsigned char same_address[sizeof(torch::nn::LinearImpl)];
torch::nn::Linear linear_at_the_same_address() {
  auto* impl = new (same_address) torch::nn::LinearImpl(2, 2);
  return torch::nn::Linear(std::shared_ptr<torch::nn::LinearImpl>(
      impl, [](torch::nn::LinearImpl* dead) { dead->~LinearImpl(); }));
}
}  // namespace

TEST(RemovableHandle, HarmlessAfterItsModuleWasDestroyed) {
  RemovableHandle handle;
  int dead_calls = 0;
  const torch::nn::Module* dead_address = nullptr;
  {
    torch::nn::Linear linear = linear_at_the_same_address();
    dead_address = linear.get();
    handle = modhooks::register_forward_hook(
        linear, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++dead_calls; });
  }
  // A new module at the dead one's address starts with no hooks, the dead one's handle still
  // held.
  torch::nn::Linear fresh = linear_at_the_same_address();
  ASSERT_EQ(fresh.get(), dead_address);
  int calls = 0;
  ScopedHandle other(modhooks::register_module_forward_pre_hook(
      [&](torch::nn::Module&, const IValues&) { ++calls; }));
  modhooks::call(fresh, at::randn({1, 2}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(dead_calls, 0);
  auto hooks = modhooks::detail::find_hooks(*fresh);
  EXPECT_TRUE(hooks == nullptr || hooks->forward.empty());
  // Removing it then touches nothing, twice; the new module's own hooks stay.
  ScopedHandle own(modhooks::register_forward_hook(
      fresh, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++calls; }));
  handle.remove();
  handle.remove();
  modhooks::call(fresh, at::randn({1, 2}));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(dead_calls, 0);
}

TEST(RemovableHandle, AModuleNoSharedPtrOwnsCannotTakeHooks) {
  // A module on the stack cannot tell its death: a module built later at its address would
  // inherit hooks whose captures are gone. Registration is refused, naming the module.
  torch::nn::LinearImpl on_stack(2, 2);
  const std::string why = "a hook on Linear cannot be tied to its lifetime";
  EXPECT_ERROR_WITH(modhooks::register_forward_hook(
                        on_stack, [](torch::nn::Module&, const IValues&, const c10::IValue&) {}),
                    RuntimeError, "nn.hook.unowned_module", why);
  EXPECT_ERROR_WITH(
      modhooks::register_forward_pre_hook(on_stack, [](torch::nn::Module&, const IValues&) {}),
      RuntimeError, "nn.hook.unowned_module", why);
  EXPECT_ERROR_WITH(modhooks::register_full_backward_hook(
                        on_stack, [](torch::nn::Module&, const modhooks::TensorList&,
                                     const modhooks::TensorList&) {}),
                    RuntimeError, "nn.hook.unowned_module", why);
  EXPECT_EQ(modhooks::detail::find_hooks(on_stack), nullptr);
  // The same module owned by a shared_ptr takes them.
  auto owned = std::make_shared<torch::nn::LinearImpl>(2, 2);
  ScopedHandle fine(modhooks::register_forward_hook(
      owned, [](torch::nn::Module&, const IValues&, const c10::IValue&) {}));
  EXPECT_NE(modhooks::detail::find_hooks(*owned), nullptr);
}

TEST(ForwardHooks, HookWrittenForTheConcreteModuleType) {
  torch::nn::Linear linear(3, 2);
  int64_t seen = 0;
  ScopedHandle h(modhooks::register_forward_hook(
      linear, [&](torch::nn::LinearImpl& m, const IValues&, const c10::IValue&) {
        seen = m.options.out_features();
      }));
  modhooks::call(linear, at::randn({1, 3}));
  EXPECT_EQ(seen, 2);
}

TEST(ForwardHooks, OptionalReturnsAndNulloptLeaveValuesAlone) {
  torch::nn::Sigmoid m;
  ScopedHandle h(modhooks::register_forward_hook(
      m, [](torch::nn::Module&, const IValues&, const c10::IValue&) -> std::optional<c10::IValue> {
        return std::nullopt;
      }));
  auto x = at::randn({3});
  EXPECT_TRUE(at::allclose(modhooks::call(m, x), at::sigmoid(x)));
}

}  // namespace
