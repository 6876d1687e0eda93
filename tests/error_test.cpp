// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// modhooks::Error's categories and ids: the types, and one real raise site per category.
#include "modhooks/core/error.h"

#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <type_traits>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/checkpoint/model_io.h"
#include "modhooks/nn/submodule.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_dict.h"
#include "test_util.h"

namespace {

template <class E>
class Category : public ::testing::Test {};

using Categories = ::testing::Types<modhooks::KeyError, modhooks::ValueError, modhooks::TypeError,
                                    modhooks::AttributeError, modhooks::IndexError,
                                    modhooks::RuntimeError, modhooks::FormatError>;
TYPED_TEST_SUITE(Category, Categories);

TYPED_TEST(Category, DerivesFromErrorAndStdException) {
  static_assert(std::is_base_of_v<modhooks::Error, TypeParam>);
  static_assert(std::is_base_of_v<std::exception, TypeParam>);
  try {
    throw TypeParam("core.test.thrown", "the text");
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const modhooks::Error*>(&e), nullptr);
    EXPECT_STREQ(e.what(), "the text");
  }
}

TYPED_TEST(Category, IdAndTextRoundTrip) {
  const TypeParam e("core.test.round_trip", "some text");
  EXPECT_STREQ(e.id(), "core.test.round_trip");
  EXPECT_STREQ(e.what(), "some text");
}

/// with_message is how modhooks adds context (a file's path) on the way out: the error that
/// comes out must still be caught by its category and keep its id.
TYPED_TEST(Category, WithMessageKeepsTypeAndId) {
  const TypeParam original("core.test.context", "inner");
  const modhooks::Error& as_base = original;
  try {
    std::rethrow_exception(as_base.with_message("outer: inner"));
  } catch (const TypeParam& e) {
    EXPECT_STREQ(e.id(), "core.test.context");
    EXPECT_STREQ(e.what(), "outer: inner");
  } catch (...) {
    ADD_FAILURE() << "with_message lost the category";
  }
}

TYPED_TEST(Category, DetailFailThrowsTheCategory) {
  EXPECT_EQ(
      expect_error<TypeParam>([] { modhooks::detail::fail<TypeParam>("core.test.fail", "failed"); },
                              "core.test.fail"),
      "failed");
}

TEST(Error, CategoriesAreDistinct) {
  // A KeyError is not caught as a ValueError: each category is its own branch under Error.
  bool caught_as_key = false;
  try {
    modhooks::detail::fail<modhooks::KeyError>("core.test.key", "k");
  } catch (const modhooks::ValueError&) {
    ADD_FAILURE() << "a KeyError was caught as a ValueError";
  } catch (const modhooks::KeyError&) {
    caught_as_key = true;
  }
  EXPECT_TRUE(caught_as_key);
}

// --- one raise site per category, through the public API (IndexError has none yet)

TEST(ErrorSites, KeyErrorFromStateDictAt) {
  const modhooks::StateDict sd;
  EXPECT_ERROR(sd.at("absent"), KeyError, "state.state_dict.missing_key");
}

TEST(ErrorSites, ValueErrorFromSaveModel) {
  const std::string path = ::testing::TempDir() + "error_test_model.safetensors.index.json";
  torch::nn::Linear linear(2, 3);
  EXPECT_ERROR(modhooks::save_model(linear, path, 0), ValueError,
               "checkpoint.save.bad_max_shard_size");
}

TEST(ErrorSites, TypeErrorFromStateDictFrom) {
  EXPECT_ERROR(modhooks::StateDict::from(c10::IValue(3)), TypeError, "state.state_dict.not_a_dict");
}

TEST(ErrorSites, AttributeErrorFromSubmodule) {
  torch::nn::Linear linear(2, 3);
  EXPECT_EQ(expect_error<modhooks::AttributeError>([&] { modhooks::submodule(linear, "blokc"); },
                                                   "nn.submodule.no_attribute"),
            "Linear has no attribute `blokc`");  // Python's text
  EXPECT_ERROR(modhooks::submodule(linear, "weight"), AttributeError, "nn.submodule.not_a_module");
}

TEST(ErrorSites, RuntimeErrorFromLoadStateDict) {
  torch::nn::Linear linear(2, 3);
  modhooks::StateDict sd;
  sd.insert_or_assign("weight", at::zeros({3, 2}));
  EXPECT_ERROR(modhooks::load_state_dict(linear, sd), RuntimeError, "state.load.missing_keys");
  sd.insert_or_assign("bias", at::zeros({4}));
  EXPECT_ERROR(modhooks::load_state_dict(linear, sd), RuntimeError, "state.load.size_mismatch");
}

TEST(ErrorSites, RuntimeErrorFromMissingFile) {
  EXPECT_ERROR(modhooks::load("/nonexistent/model.pt"), RuntimeError, "checkpoint.io.open_failed");
}

TEST(ErrorSites, FormatErrorFromGarbageFile) {
  const std::string path = ::testing::TempDir() + "error_test_garbage.pt";
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(200, 'x');
  }
  // The path is added as context; the type and id are the zip reader's.
  const std::string text = expect_error<modhooks::FormatError>([&] { modhooks::load(path); },
                                                               "checkpoint.zip.not_a_zip");
  EXPECT_NE(text.find(path), std::string::npos) << text;
  std::remove(path.c_str());
}

}  // namespace
