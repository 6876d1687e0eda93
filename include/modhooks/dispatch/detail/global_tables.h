// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "modhooks/dispatch/detail/global.h"
#include "modhooks/dispatch/detail/module_hooks.h"
#include "modhooks/version.h"

// The definitions behind global.h, for the one unit of each adapter that instantiates them for
// its kind: the global lists of a kind come from its adapter, as
//   template struct modhooks::detail::GlobalHooks<Kind>;
// and declared `extern template` in a header of the adapter that its callers include.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

template <class M>
std::atomic<std::int64_t> GlobalHooks<M>::count{0};

/// Keeps `global_hooks_active<M>` equal to the number of hooks in the global lists of `M`.
template <class M>
class GlobalCounter final : public HookObserver {
 public:
  void hooks_changed(std::int64_t delta) noexcept override {
    global_hooks_active<M>().fetch_add(delta, std::memory_order_relaxed);
  }
};

template <class M>
const std::shared_ptr<ModuleHooks<M>>& GlobalHooks<M>::tables() {
  static const std::shared_ptr<ModuleHooks<M>> hooks = [] {
    auto made = std::make_shared<ModuleHooks<M>>(std::make_shared<GlobalCounter<M>>());
    add_global_tables([tables = made.get()](std::uint64_t id) {
      tables->forward_pre.remove(id);
      tables->forward.remove(id);
      tables->backward_pre.remove(id);
      tables->backward.remove(id);
    });
    return made;
  }();
  return hooks;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
