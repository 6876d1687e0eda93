// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace modhooks {
namespace detail {

/// Maps a module's identity (an address) to its hook tables.
///
/// libtorch modules have no slot for hooks, so they live beside the module. Each entry keeps a
/// liveness test (a weak reference to the module) so that an entry whose module died is never
/// handed to a new module that reuses the address; dead entries are dropped when seen and swept
/// as the table grows, which also frees their hooks.
template <class Hooks>
class ModuleTable {
 public:
  using Alive = std::function<bool()>;

  /// The live module's tables, or null when it has none.
  std::shared_ptr<Hooks> find(const void* key) {
    std::shared_ptr<Hooks> dead;  // destroyed after the lock: hooks' destructors may re-enter
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = slots_.find(key);
    if (it == slots_.end()) return nullptr;
    if (it->second.alive()) return it->second.hooks;
    dead = std::move(it->second.hooks);
    slots_.erase(it);
    return nullptr;
  }

  /// The module's tables, created by `make` on first use. `alive` tells later whether the
  /// module is still the one at `key`.
  template <class Make>
  std::shared_ptr<Hooks> get_or_create(const void* key, Alive alive, Make&& make) {
    std::vector<std::shared_ptr<Hooks>> dead;
    std::lock_guard<std::mutex> lock(mutex_);
    if (slots_.size() >= sweep_at_) {
      for (auto it = slots_.begin(); it != slots_.end();) {
        if (it->second.alive()) {
          ++it;
        } else {
          dead.push_back(std::move(it->second.hooks));
          it = slots_.erase(it);
        }
      }
      sweep_at_ = std::max<std::size_t>(kMinSweep, 2 * slots_.size());
    }
    auto& slot = slots_[key];
    if (!slot.hooks || !slot.alive()) {
      dead.push_back(std::move(slot.hooks));
      slot = Slot{std::move(alive), make()};
    }
    return slot.hooks;
  }

  std::shared_ptr<Hooks> get_or_create(const void* key, Alive alive) {
    return get_or_create(key, std::move(alive), [] { return std::make_shared<Hooks>(); });
  }

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

 private:
  static constexpr std::size_t kMinSweep = 64;
  struct Slot {
    Alive alive;
    std::shared_ptr<Hooks> hooks;
  };
  std::mutex mutex_;
  std::unordered_map<const void*, Slot> slots_;
  std::size_t sweep_at_ = kMinSweep;
};

/// The process's one table of `Hooks` entries (one per module kind and layer).
template <class Hooks>
ModuleTable<Hooks>& table_of() {
  static ModuleTable<Hooks> table;
  return table;
}

}  // namespace detail
}  // namespace modhooks
