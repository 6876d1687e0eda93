// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/dispatch/detail/global.h"

#include <cstdint>
#include <type_traits>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

template <class M>
std::atomic<std::int64_t> GlobalHooksActive<M>::count{0};

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

template struct GlobalHooksActive<torch::nn::Module>;
template struct GlobalHooksActive<torch::jit::Module>;
template struct GlobalHooksActive<const aoti::Point>;
template const std::shared_ptr<ModuleHooks<torch::nn::Module>>& global_hooks<torch::nn::Module>();
template const std::shared_ptr<ModuleHooks<torch::jit::Module>>& global_hooks<torch::jit::Module>();
template const std::shared_ptr<ModuleHooks<const aoti::Point>>& global_hooks<const aoti::Point>();

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
    for_each_kind(Kinds{}, [id](auto* kind) {
      using M = std::remove_pointer_t<decltype(kind)>;
      remove_from(*global_hooks<M>(), id);
    });
  }
};
}  // namespace

const std::shared_ptr<HookTableBase>& global_hook_tables() {
  static const std::shared_ptr<HookTableBase> tables = std::make_shared<GlobalHookTables>();
  return tables;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
