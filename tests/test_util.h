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

/// The text of the error that `f` throws, which must be an `E` (a modhooks category) with id
/// `id`; fails the test when `f` throws nothing, another type or another id. Tests tell
/// failures apart this way, and check the text beside it only where the text is the point
/// (Python's messages).
template <class E>
std::string expect_error(const std::function<void()>& f, const std::string& id) {
  try {
    f();
  } catch (const E& e) {
    EXPECT_EQ(e.id(), id) << e.what();
    return e.what();
  } catch (const modhooks::Error& e) {
    ADD_FAILURE() << "expected a " << typeid(E).name() << " \"" << id << "\", got a "
                  << typeid(e).name() << " \"" << e.id() << "\": " << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a " << typeid(E).name() << " \"" << id << "\", got a "
                  << typeid(e).name() << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a " << typeid(E).name() << " \"" << id << "\", nothing was thrown";
  return "";
}

/// `statement` throws a `modhooks::Type` with id `id` (see expect_error).
#define EXPECT_ERROR(statement, Type, id) (void)expect_error<modhooks::Type>([&] { statement; }, id)

/// EXPECT_ERROR, and the text contains `substring`: for texts that are Python's.
#define EXPECT_ERROR_WITH(statement, Type, id, substring)                                \
  do {                                                                                   \
    const std::string error_text = expect_error<modhooks::Type>([&] { statement; }, id); \
    EXPECT_NE(error_text.find(substring), std::string::npos) << error_text;              \
  } while (0)

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
