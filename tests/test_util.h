// Shared helpers of the GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <typeinfo>

#include "modhooks/core/error.h"

/// PyTorch's ASSERT_THROWS_WITH: `statement` throws a std::exception whose text contains
/// `substring`.
#define EXPECT_THROWS_WITH(statement, substring)                                       \
  do {                                                                                 \
    try {                                                                              \
      statement;                                                                       \
      ADD_FAILURE() << "expected an exception containing: " << (substring);            \
    } catch (const std::exception& e) {                                                \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what(); \
    }                                                                                  \
  } while (0)

/// The text of the `E` (a modhooks::Error unless told) that `f` throws; fails the test when it
/// throws none.
template <class E = modhooks::Error>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no " << typeid(E).name() << " thrown";
  return "";
}
