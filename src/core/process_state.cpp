// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The hook core's process-wide state. It lives here, not in headers, so that there is one of each
// per process however many shared objects are linked against a shared libmodhooks.
#include <atomic>
#include <cstdint>

#include "modhooks/core/detail/hook_list.h"
#include "modhooks/core/handle.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

std::atomic<std::uint64_t> next_hook_id{1};
std::atomic<std::int64_t> call_hooks_active{0};
std::atomic<std::uint64_t> hook_lists_generation{0};
std::atomic<void (*)()> hook_lists_changed_here{nullptr};
HookedModuleFilter hooked_modules;

}  // namespace detail
MODHOOKS_END_NAMESPACE
