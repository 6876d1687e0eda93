// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/dispatch/detail/global.h"

#include <cstdint>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

std::atomic<std::int64_t> global_nn_hooks_active{0};
std::atomic<std::int64_t> global_jit_hooks_active{0};

namespace {
/// Keeps `global_hooks_active<M>` equal to the number of hooks in the global tables of `M`.
template <class M>
class GlobalCounter final : public HookObserver {
 public:
  void hooks_changed(std::int64_t delta) noexcept override {
    global_hooks_active<M>().fetch_add(delta, std::memory_order_relaxed);
  }
};
}  // namespace

template <class M>
const std::shared_ptr<ModuleHooks<M>>& global_hooks() {
  static const std::shared_ptr<ModuleHooks<M>> hooks =
      std::make_shared<ModuleHooks<M>>(std::make_shared<GlobalCounter<M>>());
  return hooks;
}

template const std::shared_ptr<ModuleHooks<torch::nn::Module>>& global_hooks<torch::nn::Module>();
template const std::shared_ptr<ModuleHooks<torch::jit::Module>>& global_hooks<torch::jit::Module>();

namespace {
template <class Hooks>
void remove_from(Hooks& hooks, std::uint64_t id) noexcept {
  hooks.forward_pre.remove(id);
  hooks.forward.remove(id);
  hooks.backward_pre.remove(id);
  hooks.backward.remove(id);
}

class GlobalHookTables final : public HookTableBase {
 public:
  void remove(std::uint64_t id) noexcept override {
    remove_from(*global_hooks<torch::nn::Module>(), id);
    remove_from(*global_hooks<torch::jit::Module>(), id);
  }
};
}  // namespace

const std::shared_ptr<HookTableBase>& global_hook_tables() {
  static const std::shared_ptr<HookTableBase> tables = std::make_shared<GlobalHookTables>();
  return tables;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
