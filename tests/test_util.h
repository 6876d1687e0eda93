// Shared helpers of the GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <string>

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
