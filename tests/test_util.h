// Shared helpers of the GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

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

/// The text of the modhooks::Error that `f` throws; fails the test when it throws none.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const modhooks::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no modhooks::Error thrown";
  return "";
}
