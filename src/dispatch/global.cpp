// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/dispatch/detail/global.h"

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// Every kind's global lists made so far, as the function that removes an id from them.
class GlobalHookRemover final : public HookRemover {
 public:
  void add(std::function<void(std::uint64_t)> remove) {
    std::lock_guard<std::mutex> lock(mutex_);
    tables_.push_back(std::move(remove));
  }
  void remove(std::uint64_t id) noexcept override {
    std::vector<std::function<void(std::uint64_t)>> tables;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tables = tables_;
    }
    for (const auto& remove_from : tables) remove_from(id);
  }

 private:
  std::mutex mutex_;
  std::vector<std::function<void(std::uint64_t)>> tables_;
};

const std::shared_ptr<GlobalHookRemover>& tables() {
  static const auto made = std::make_shared<GlobalHookRemover>();
  return made;
}

}  // namespace

const std::shared_ptr<HookRemover>& global_hook_remover() {
  static const std::shared_ptr<HookRemover> as_base = tables();
  return as_base;
}

void add_global_tables(std::function<void(std::uint64_t)> remove) {
  tables()->add(std::move(remove));
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
