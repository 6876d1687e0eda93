// SPDX-License-Identifier: BSD-3-Clause
// Cost of running modules through modhooks. Each benchmark times a case and its baseline in
// alternation within the same run (the order flips every iteration), so that the slow drift of a
// shared machine hits both alike, and reports both means and what the case adds:
//   - Linear(16,16): direct forward vs call with no hooks anywhere;
//   - Linear(16,16): direct forward vs call with two forward hooks;
//   - Linear(16,16) and Identity without hooks while 100 other modules have hooks: forward vs
//     call; Identity with two forward hooks: forward vs call;
//   - one and two no-op forward hooks on Identity, Linear(16,16) and Conv2d(3,3,3), grad mode on
//     and off: forward vs call;
//   - the same modules with two no-op callbacks called by hand after forward (the floor of any
//     hook mechanism): forward vs that floor, and that floor vs call with two hooks;
//   - the other combinations, grad mode on and off: a forward pre-hook and a forward hook
//     (Identity and Linear(16,16) vs forward; Conv2d vs a pre and a post callback by hand), one
//     always-call forward hook, and a global forward hook beside the module's own (each vs
//     forward, beside the plain one- and two-hook cases);
//   - the same MLP, full backward hooks vs the floor of the mechanism (a bare identity node on
//     each side of each layer);
//   - 8 x Linear(64,64), batch 32, forward+backward: torch::nn::Sequential with no hooks vs
//     modhooks::Sequential with a full backward hook on every layer;
//   - a TorchScript module: forward vs call with no hooks.
// Python's figures for the same cases come from bench/python_hooks_bench.py (run-bench.sh).
#include <ATen/core/grad_mode.h>
#include <benchmark/benchmark.h>
#include <c10/util/MaybeOwned.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "modhooks/modhooks.h"
#include "paired.h"

namespace {

using IValues = std::vector<c10::IValue>;
using modhooks_bench::paired;

constexpr int kBatch = 64;  // calls per timed batch of the microsecond-sized cases

/// `module` on `x`: `forward` called directly vs through `call`, in batches of `kBatch`.
template <class Holder>
void call_vs_forward(benchmark::State& state, Holder& module, const at::Tensor& x) {
  paired(
      state, kBatch,
      [&] {
        for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(module->forward(x));
      },
      [&] {
        for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(modhooks::call(module, x));
      });
}
template <class Holder>
void call_vs_forward(benchmark::State& state, Holder& module) {
  call_vs_forward(state, module, at::randn({1, 16}));
}

/// `module` with `hooks` forward hooks of its own (each counting its calls), on `x`.
template <class Holder>
void with_forward_hooks(benchmark::State& state, Holder module, int hooks,
                        const at::Tensor& x = at::randn({1, 16})) {
  int64_t seen = 0;
  std::vector<modhooks::ScopedHandle> handles;
  for (int i = 0; i < hooks; ++i) {
    handles.emplace_back(modhooks::register_forward_hook(
        module, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++seen; }));
  }
  call_vs_forward(state, module, x);
  benchmark::DoNotOptimize(seen);
}

/// `module` without hooks of its own while 100 other modules have a forward hook each: `call`
/// leaves its fast path, and the filter of hooked modules must send it on to `forward`.
template <class Holder>
void unhooked_while_others_hooked(benchmark::State& state, Holder module) {
  std::vector<torch::nn::Linear> others;
  std::vector<modhooks::ScopedHandle> handles;
  for (int i = 0; i < 100; ++i) {
    others.emplace_back(1, 1);
    handles.emplace_back(modhooks::register_forward_hook(
        others.back(), [](torch::nn::Module&, const IValues&, const c10::IValue&) {}));
  }
  call_vs_forward(state, module);
}

void BM_Linear16_CallNoHooks_vs_Forward(benchmark::State& state) {
  with_forward_hooks(state, torch::nn::Linear(16, 16), 0);
}
BENCHMARK(BM_Linear16_CallNoHooks_vs_Forward);

void BM_Linear16_CallTwoForwardHooks_vs_Forward(benchmark::State& state) {
  with_forward_hooks(state, torch::nn::Linear(16, 16), 2);
}
BENCHMARK(BM_Linear16_CallTwoForwardHooks_vs_Forward);

void BM_Linear16_CallUnhookedWhileOthersHooked_vs_Forward(benchmark::State& state) {
  unhooked_while_others_hooked(state, torch::nn::Linear(16, 16));
}
BENCHMARK(BM_Linear16_CallUnhookedWhileOthersHooked_vs_Forward);

/// The same two cases on `Identity`, whose forward costs a few nanoseconds, so that what `call`
/// adds is not lost in the noise of a real layer.
void BM_Identity_CallUnhookedWhileOthersHooked_vs_Forward(benchmark::State& state) {
  unhooked_while_others_hooked(state, torch::nn::Identity());
}
BENCHMARK(BM_Identity_CallUnhookedWhileOthersHooked_vs_Forward);

void BM_Identity_CallTwoForwardHooks_vs_Forward(benchmark::State& state) {
  with_forward_hooks(state, torch::nn::Identity(), 2);
}
BENCHMARK(BM_Identity_CallTwoForwardHooks_vs_Forward);

/// One and two no-op forward hooks on Identity, Linear(16,16) and Conv2d(3,3,3) (on 1x3x8x8):
/// what the hooked call adds over `forward`, with grad mode on (argument 1) and off (0).
template <class Holder>
void hooks_in_grad_mode(benchmark::State& state, Holder module, int hooks, const at::Tensor& x) {
  std::optional<at::NoGradGuard> no_grad;
  if (state.range(0) == 0) no_grad.emplace();
  with_forward_hooks(state, std::move(module), hooks, x);
}
void BM_Identity_CallOneForwardHook_vs_Forward(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Identity(), 1, at::randn({1, 16}));
}
BENCHMARK(BM_Identity_CallOneForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Identity_CallTwoForwardHooks_vs_Forward_Grad(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Identity(), 2, at::randn({1, 16}));
}
BENCHMARK(BM_Identity_CallTwoForwardHooks_vs_Forward_Grad)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Linear16_CallOneForwardHook_vs_Forward(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Linear(16, 16), 1, at::randn({1, 16}));
}
BENCHMARK(BM_Linear16_CallOneForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Linear16_CallTwoForwardHooks_vs_Forward_Grad(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Linear(16, 16), 2, at::randn({1, 16}));
}
BENCHMARK(BM_Linear16_CallTwoForwardHooks_vs_Forward_Grad)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Conv2d_CallOneForwardHook_vs_Forward(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Conv2d(3, 3, 3), 1, at::randn({1, 3, 8, 8}));
}
BENCHMARK(BM_Conv2d_CallOneForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Conv2d_CallTwoForwardHooks_vs_Forward_Grad(benchmark::State& state) {
  hooks_in_grad_mode(state, torch::nn::Conv2d(3, 3, 3), 2, at::randn({1, 3, 8, 8}));
}
BENCHMARK(BM_Conv2d_CallTwoForwardHooks_vs_Forward_Grad)->ArgName("grad")->Arg(1)->Arg(0);

/// The floor of any forward-hook mechanism, written by hand: `forward`, then two no-op callbacks
/// of the type modhooks stores (a `std::function` returning a possible replacement) called on
/// argument and output vectors built outside the loop, the output borrowed. What it adds over
/// `forward` no library can take out; what `call` adds over it is modhooks' own.
template <class Holder>
void hand_written_hooks(benchmark::State& state, Holder module, const at::Tensor& x,
                        bool against_call) {
  std::optional<at::NoGradGuard> no_grad;
  if (state.range(0) == 0) no_grad.emplace();
  using Fn = std::function<std::optional<c10::IValue>(torch::nn::Module&, const IValues&,
                                                      const c10::IValue&)>;
  int64_t seen = 0;
  std::vector<Fn> fns;
  std::vector<modhooks::ScopedHandle> handles;
  for (int i = 0; i < 2; ++i) {
    fns.emplace_back([&](torch::nn::Module&, const IValues&, const c10::IValue&) {
      ++seen;
      return std::optional<c10::IValue>();
    });
    if (against_call) {
      handles.emplace_back(modhooks::register_forward_hook(
          module, [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++seen; }));
    }
  }
  const IValues args{x};
  torch::nn::Module& base = *module;
  auto floor = [&] {
    for (int i = 0; i < kBatch; ++i) {
      at::Tensor y = module->forward(x);
      c10::IValue out(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(y));
      for (const Fn& fn : fns) benchmark::DoNotOptimize(fn(base, args, out));
      c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(out);
      benchmark::DoNotOptimize(y);
    }
  };
  if (against_call) {
    paired(state, kBatch, floor, [&] {
      for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(modhooks::call(module, x));
    });
  } else {
    paired(
        state, kBatch,
        [&] {
          for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(module->forward(x));
        },
        floor);
  }
  benchmark::DoNotOptimize(seen);
}
void BM_Identity_TwoHandWrittenHooks_vs_Forward(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Identity(), at::randn({1, 16}), false);
}
BENCHMARK(BM_Identity_TwoHandWrittenHooks_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Identity_CallTwoForwardHooks_vs_HandWritten(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Identity(), at::randn({1, 16}), true);
}
BENCHMARK(BM_Identity_CallTwoForwardHooks_vs_HandWritten)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Linear16_TwoHandWrittenHooks_vs_Forward(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Linear(16, 16), at::randn({1, 16}), false);
}
BENCHMARK(BM_Linear16_TwoHandWrittenHooks_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Linear16_CallTwoForwardHooks_vs_HandWritten(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Linear(16, 16), at::randn({1, 16}), true);
}
BENCHMARK(BM_Linear16_CallTwoForwardHooks_vs_HandWritten)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Conv2d_TwoHandWrittenHooks_vs_Forward(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Conv2d(3, 3, 3), at::randn({1, 3, 8, 8}), false);
}
BENCHMARK(BM_Conv2d_TwoHandWrittenHooks_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Conv2d_CallTwoForwardHooks_vs_HandWritten(benchmark::State& state) {
  hand_written_hooks(state, torch::nn::Conv2d(3, 3, 3), at::randn({1, 3, 8, 8}), true);
}
BENCHMARK(BM_Conv2d_CallTwoForwardHooks_vs_HandWritten)->ArgName("grad")->Arg(1)->Arg(0);

/// The other combinations of call hooks, each a no-op counting its calls: which to register.
struct Combination {
  bool pre = false;      // a forward pre-hook
  bool forward = false;  // a plain forward hook
  bool always = false;   // an always-call forward hook
  bool global = false;   // a global forward hook (register_module_forward_hook)
};

/// `module` with the hooks of `combination`, grad mode as `state.range(0)` says, on `x`: `call`
/// vs `forward`, or with `floor`, vs a pre and a post callback called by hand around `forward`.
template <class Holder>
void combination(benchmark::State& state, Holder module, Combination combination,
                 const at::Tensor& x, bool floor = false) {
  std::optional<at::NoGradGuard> no_grad;
  if (state.range(0) == 0) no_grad.emplace();
  int64_t seen = 0;
  std::vector<modhooks::ScopedHandle> handles;
  auto hook = [&](torch::nn::Module&, const IValues&, const c10::IValue&) { ++seen; };
  if (combination.pre) {
    handles.emplace_back(modhooks::register_forward_pre_hook(
        module, [&](torch::nn::Module&, const IValues&) { ++seen; }));
  }
  if (combination.global) handles.emplace_back(modhooks::register_module_forward_hook(hook));
  if (combination.forward) handles.emplace_back(modhooks::register_forward_hook(module, hook));
  if (combination.always) {
    handles.emplace_back(modhooks::register_forward_hook(
        module, hook, modhooks::ForwardHookOptions().always_call(true)));
  }
  if (!floor) {
    call_vs_forward(state, module, x);
  } else {
    using Pre = std::function<std::optional<IValues>(torch::nn::Module&, const IValues&)>;
    using Post = std::function<std::optional<c10::IValue>(torch::nn::Module&, const IValues&,
                                                          const c10::IValue&)>;
    const Pre pre = [&](torch::nn::Module&, const IValues&) {
      ++seen;
      return std::optional<IValues>();
    };
    const Post post = [&](torch::nn::Module&, const IValues&, const c10::IValue&) {
      ++seen;
      return std::optional<c10::IValue>();
    };
    const IValues args{x};
    torch::nn::Module& base = *module;
    paired(
        state, kBatch,
        [&] {
          for (int i = 0; i < kBatch; ++i) {
            benchmark::DoNotOptimize(pre(base, args));
            at::Tensor y = module->forward(x);
            c10::IValue out(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(y));
            benchmark::DoNotOptimize(post(base, args, out));
            c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(out);
            benchmark::DoNotOptimize(y);
          }
        },
        [&] {
          for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(modhooks::call(module, x));
        });
  }
  benchmark::DoNotOptimize(seen);
}
constexpr Combination kPreAndForward{true, true, false, false};
constexpr Combination kAlways{false, false, true, false};
constexpr Combination kGlobalAndOwn{false, true, false, true};

void BM_Identity_CallPreAndForwardHook_vs_Forward(benchmark::State& state) {
  combination(state, torch::nn::Identity(), kPreAndForward, at::randn({1, 16}));
}
BENCHMARK(BM_Identity_CallPreAndForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Linear16_CallPreAndForwardHook_vs_Forward(benchmark::State& state) {
  combination(state, torch::nn::Linear(16, 16), kPreAndForward, at::randn({1, 16}));
}
BENCHMARK(BM_Linear16_CallPreAndForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Conv2d_CallPreAndForwardHook_vs_HandWritten(benchmark::State& state) {
  combination(state, torch::nn::Conv2d(3, 3, 3), kPreAndForward, at::randn({1, 3, 8, 8}), true);
}
BENCHMARK(BM_Conv2d_CallPreAndForwardHook_vs_HandWritten)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Identity_CallAlwaysCallHook_vs_Forward(benchmark::State& state) {
  combination(state, torch::nn::Identity(), kAlways, at::randn({1, 16}));
}
BENCHMARK(BM_Identity_CallAlwaysCallHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);
void BM_Identity_CallGlobalAndOwnForwardHook_vs_Forward(benchmark::State& state) {
  combination(state, torch::nn::Identity(), kGlobalAndOwn, at::randn({1, 16}));
}
BENCHMARK(BM_Identity_CallGlobalAndOwnForwardHook_vs_Forward)->ArgName("grad")->Arg(1)->Arg(0);

/// Fills `hooked` with eight Linear(64, 64), each with a no-op full backward hook held in
/// `handles`; `baseline_layer()` makes the baseline's own layer before each.
template <class BaselineLayer>
void hooked_mlp8(modhooks::Sequential& hooked, std::vector<modhooks::ScopedHandle>& handles,
                 BaselineLayer&& baseline_layer) {
  for (int i = 0; i < 8; ++i) {
    baseline_layer();
    hooked->push_back(torch::nn::Linear(64, 64));
    handles.emplace_back(modhooks::register_full_backward_hook(
        hooked->ptr(i),
        [](torch::nn::Module&, const modhooks::TensorList&, const modhooks::TensorList&) {}));
  }
}

void BM_MLP8_FullBackwardHookPerLayer_vs_NoHooks(benchmark::State& state) {
  torch::nn::Sequential plain;
  modhooks::Sequential hooked;
  std::vector<modhooks::ScopedHandle> handles;
  hooked_mlp8(hooked, handles, [&] { plain->push_back(torch::nn::Linear(64, 64)); });
  auto x = at::randn({32, 64}).requires_grad_();
  paired(
      state, 1, [&] { plain->forward(x).sum().backward(); },
      [&] { modhooks::call(hooked, x).sum().backward(); });
}
BENCHMARK(BM_MLP8_FullBackwardHookPerLayer_vs_NoHooks);

/// The floor of the mechanism: the same MLP with each layer's input and output passed through
/// one bare identity autograd node (`view_as`), as the full-backward wiring does, but no hooks.
void BM_MLP8_FullBackwardHookPerLayer_vs_IdentityFloor(benchmark::State& state) {
  std::vector<torch::nn::Linear> floor_layers;
  modhooks::Sequential hooked;
  std::vector<modhooks::ScopedHandle> handles;
  hooked_mlp8(hooked, handles, [&] { floor_layers.emplace_back(64, 64); });
  auto x = at::randn({32, 64}).requires_grad_();
  paired(
      state, 1,
      [&] {
        at::Tensor y = x;
        for (auto& layer : floor_layers) y = layer->forward(y.view_as(y)).view_as(y);
        y.sum().backward();
      },
      [&] { modhooks::call(hooked, x).sum().backward(); });
}
BENCHMARK(BM_MLP8_FullBackwardHookPerLayer_vs_IdentityFloor);

/// A TorchScript module built in C++: x @ w with a 16x16 w.
torch::jit::Module script_linear() {
  torch::jit::Module module("ScriptLinear");
  module.register_parameter("w", at::randn({16, 16}), false);
  module.define("def forward(self, x):\n  return x.mm(self.w)\n");
  return module;
}

void BM_Script_CallNoHooks_vs_Forward(benchmark::State& state) {
  auto module = script_linear();
  IValues inputs{at::randn({1, 16})};
  paired(
      state, kBatch,
      [&] {
        for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(module.forward(inputs));
      },
      [&] {
        for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(modhooks::call(module, inputs));
      });
}
BENCHMARK(BM_Script_CallNoHooks_vs_Forward);

}  // namespace

BENCHMARK_MAIN();
