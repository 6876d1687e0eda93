// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/core/handle.h and the id counter.
#include "modhooks/core/handle.h"

#include <gtest/gtest.h>

#include <memory>

#include "modhooks/core/detail/hook_list.h"

namespace {

using modhooks::RemovableHandle;
using modhooks::ScopedHandle;
using List = modhooks::detail::HookList<int>;

RemovableHandle add(const std::shared_ptr<List>& list, int value, bool prepend = false) {
  return modhooks::detail::make_handle(list, *list, list->add(value, prepend));
}

TEST(RemovableHandle, DefaultHandleRefersToNothing) {
  RemovableHandle handle;
  EXPECT_EQ(handle.id(), 0u);
  handle.remove();
  handle.remove();
}

TEST(RemovableHandle, IdsAreUniqueAndIncreasingAcrossTables) {
  auto a = std::make_shared<List>();
  auto b = std::make_shared<List>();
  auto h1 = add(a, 1);
  auto h2 = add(b, 2);
  auto h3 = add(a, 3);
  EXPECT_LT(h1.id(), h2.id());
  EXPECT_LT(h2.id(), h3.id());
}

TEST(RemovableHandle, RemoveIsIdempotentAndCopiesShareTheHook) {
  auto list = std::make_shared<List>();
  auto h = add(list, 1);
  auto keep = add(list, 2);
  RemovableHandle copy = h;
  h.remove();
  EXPECT_EQ(list->size(), 1u);
  copy.remove();
  h.remove();
  EXPECT_EQ(list->size(), 1u);
  EXPECT_EQ(list->snapshot()->front().hook, 2);
}

TEST(RemovableHandle, HarmlessAfterTheTableDied) {
  auto list = std::make_shared<List>();
  auto h = add(list, 1);
  const auto id = h.id();
  std::weak_ptr<List> watch = list;
  list.reset();
  EXPECT_TRUE(watch.expired());  // the handle did not keep the table alive
  h.remove();
  h.remove();
  EXPECT_EQ(h.id(), id);
  EXPECT_TRUE(watch.expired());  // nor did removing through it bring it back
}

TEST(ScopedHandle, RemovesAtScopeEnd) {
  auto list = std::make_shared<List>();
  {
    ScopedHandle scoped(add(list, 1));
    EXPECT_EQ(list->size(), 1u);
  }
  EXPECT_EQ(list->size(), 0u);
}

TEST(ScopedHandle, ReleaseKeepsTheHookAndMoveTransfersIt) {
  auto list = std::make_shared<List>();
  RemovableHandle released;
  {
    ScopedHandle scoped(add(list, 1));
    released = scoped.release();
  }
  EXPECT_EQ(list->size(), 1u);
  {
    ScopedHandle a(released);
    ScopedHandle b(std::move(a));
    EXPECT_EQ(list->size(), 1u);
  }
  EXPECT_EQ(list->size(), 0u);
}

}  // namespace
