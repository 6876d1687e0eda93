// SPDX-License-Identifier: BSD-3-Clause
// Shared helpers of the GoogleTest suites.
#pragma once

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

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

#if TORCH_VERSION_MAJOR >= 2
namespace warning_api = c10::WarningUtils;
#else
namespace warning_api = c10::Warning;  // libtorch 1.13's name
#endif

/// Collects what TORCH_WARN reports on this thread while it lives.
class WarningCapture : public c10::WarningHandler {
 public:
  WarningCapture() : previous_(warning_api::get_warning_handler()) {
    warning_api::set_warning_handler(this);
  }
  ~WarningCapture() override { warning_api::set_warning_handler(previous_); }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, bool) override {
    messages.push_back(msg);
  }
#endif

  std::vector<std::string> messages;

 private:
  c10::WarningHandler* previous_;
};
