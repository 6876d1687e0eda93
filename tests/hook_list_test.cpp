// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/core/detail/hook_list.h: order, prepend, snapshots, the activity
// counter.
#include "modhooks/core/detail/hook_list.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace {

using List = modhooks::detail::HookList<int>;

std::vector<int> values(const List& list) {
  std::vector<int> out;
  list.for_each([&](int hook) { out.push_back(hook); });
  return out;
}

TEST(HookList, InsertionOrderWithPrependFirst) {
  // Python's test_forward_hooks registration pattern: 0, 1 (prepend), 2, 3, 4 (prepend).
  List list;
  list.add(0);
  list.add(1, true);
  list.add(2);
  list.add(3);
  list.add(4, true);
  EXPECT_EQ(values(list), (std::vector<int>{4, 1, 0, 2, 3}));
}

TEST(HookList, SnapshotIsUnaffectedByLaterChanges) {
  List list;
  const auto id = list.add(1);
  list.add(2);
  auto before = list.snapshot();
  list.remove(id);
  list.add(3);
  ASSERT_EQ(before->size(), 2u);
  EXPECT_EQ((*before)[0].hook, 1);
  EXPECT_EQ(values(list), (std::vector<int>{2, 3}));
}

TEST(HookList, EmptyListsHaveNoSnapshot) {
  // CallImpl reads empty lists without their lock: an empty list's snapshot is null.
  List list;
  EXPECT_FALSE(list.snapshot());
  const auto id = list.add(1);
  ASSERT_TRUE(list.snapshot());
  EXPECT_EQ(list.snapshot()->size(), 1u);
  list.remove(id);
  EXPECT_FALSE(list.snapshot());
  EXPECT_TRUE(list.empty());
}

TEST(HookList, ListBitsFollowWhatEachListHolds) {
  // Two lists keep their bits in one word, as a module's lists do (ModuleHooks::kinds): each
  // edit changes only the editing list's bits.
  std::atomic<std::uint32_t> word{0};
  List a(nullptr, nullptr, nullptr, {&word, 1});
  List b(nullptr, nullptr, nullptr, {&word, 4});
  const auto first = a.add(1);
  EXPECT_EQ(word.load(), 1u);
  const auto second = a.add(2);
  EXPECT_EQ(word.load(), 1u);
  const auto other = b.add(7);
  EXPECT_EQ(word.load(), 5u);
  a.remove(second);
  EXPECT_EQ(word.load(), 5u);
  a.remove(first);
  EXPECT_EQ(word.load(), 4u);
  b.remove(other);
  EXPECT_EQ(word.load(), 0u);
}

TEST(HookList, RemovingAnUnknownIdChangesNothing) {
  List list;
  list.add(1);
  list.remove(987654321);
  EXPECT_EQ(list.size(), 1u);
}

TEST(HookList, CounterTracksHooksAndTheListsDeath) {
  std::atomic<std::int64_t> counter{0};
  {
    List list(&counter);
    const auto a = list.add(1);
    list.add(2);
    EXPECT_EQ(counter.load(), 2);
    list.remove(a);
    list.remove(a);
    EXPECT_EQ(counter.load(), 1);
  }
  EXPECT_EQ(counter.load(), 0);
}

TEST(HookList, AHookWhoseDestructorRemovesASiblingDoesNotDeadlock) {
  // A hook that owns a sibling's handle removes the sibling when it dies: the removal that
  // destroys it must have let go of the list's locks first.
  using Owning = modhooks::detail::HookList<std::shared_ptr<void>>;
  Owning list;
  const std::uint64_t sibling = list.add(nullptr);
  const std::uint64_t owner =
      list.add(std::shared_ptr<void>(nullptr, [&list, sibling](void*) { list.remove(sibling); }));
  std::promise<void> removed;
  std::future<void> done = removed.get_future();
  std::thread([&] {
    list.remove(owner);
    removed.set_value();
  }).detach();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "remove() deadlocked on the list's own lock";
    std::_Exit(1);  // the remover is stuck for good
  }
  EXPECT_TRUE(list.empty());
}

TEST(HookList, ConcurrentAddRemoveAndDispatch) {
  // Every snapshot the reader takes holds the permanent hook (1000) exactly once and otherwise
  // only hooks the writers added (1), however the writers interleave.
  std::atomic<std::int64_t> counter{0};
  List list(&counter);
  const auto permanent = list.add(1000);
  std::atomic<bool> stop{false};
  std::atomic<long> snapshots{0};
  std::atomic<long> inconsistent{0};
  std::thread reader([&] {
    do {
      int permanent_seen = 0;
      bool foreign = false;
      list.for_each([&](int hook) {
        if (hook == 1000) ++permanent_seen;
        foreign = foreign || (hook != 1000 && hook != 1);
      });
      if (permanent_seen != 1 || foreign) ++inconsistent;
      ++snapshots;
    } while (!stop.load());
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) list.remove(list.add(1, i % 2 == 0));
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_GT(snapshots.load(), 0);
  EXPECT_EQ(inconsistent.load(), 0);
  EXPECT_EQ(list.size(), 1u);
  EXPECT_EQ(counter.load(), 1);
  list.remove(permanent);
  EXPECT_EQ(list.size(), 0u);
  EXPECT_EQ(counter.load(), 0);
}

}  // namespace
