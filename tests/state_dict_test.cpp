// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/state/state_dict.h"

#include <ATen/ops/full.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace {

using modhooks::StateDict;

at::Tensor value(double v) { return at::full({1}, v); }

std::vector<std::string> iterated_keys(const StateDict& sd) {
  std::vector<std::string> keys;
  for (const auto& [key, tensor] : sd) keys.push_back(key);
  return keys;
}

TEST(StateDict, KeepsInsertionOrder) {
  StateDict sd;
  EXPECT_TRUE(sd.empty());
  sd.insert_or_assign("b", value(1));
  sd.insert_or_assign("a", value(2));
  sd.insert_or_assign("c", value(3));
  EXPECT_FALSE(sd.empty());
  EXPECT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(iterated_keys(sd), sd.keys());
}

TEST(StateDict, AssignKeepsPosition) {
  StateDict sd;
  sd.insert_or_assign("x", value(1));
  sd.insert_or_assign("y", value(2));
  sd.insert_or_assign("x", value(5));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(sd.at("x").item<double>(), 5);
}

TEST(StateDict, AtThrowsNamingTheKey) {
  StateDict sd;
  sd.insert_or_assign("present", value(1));
  try {
    sd.at("fc1.weight");
    FAIL() << "at() on a missing key returned";
  } catch (const modhooks::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.weight'"), std::string::npos) << e.what();
  }
  const StateDict& const_sd = sd;
  EXPECT_ERROR(const_sd.at("absent"), KeyError, "state.state_dict.missing_key");
  EXPECT_EQ(const_sd.at("present").item<double>(), 1);
}

TEST(StateDict, AtReturnsAMutableReference) {
  StateDict sd;
  sd.insert_or_assign("w", value(1));
  sd.at("w") = value(7);
  EXPECT_EQ(sd.at("w").item<double>(), 7);
  for (auto& [key, tensor] : sd) tensor = value(9);
  EXPECT_EQ(sd.at("w").item<double>(), 9);
}

TEST(StateDict, EraseAndReinsert) {
  StateDict sd;
  for (const char* key : {"a", "b", "c", "d"}) sd.insert_or_assign(key, value(1));
  EXPECT_TRUE(sd.erase("b"));
  EXPECT_FALSE(sd.erase("b"));
  EXPECT_FALSE(sd.contains("b"));
  EXPECT_EQ(sd.size(), 3u);
  EXPECT_EQ(iterated_keys(sd), (std::vector<std::string>{"a", "c", "d"}));
  // Python: a key inserted again after deletion goes to the end.
  sd.insert_or_assign("b", value(2));
  EXPECT_EQ(iterated_keys(sd), (std::vector<std::string>{"a", "c", "d", "b"}));
  EXPECT_EQ(sd.at("b").item<double>(), 2);
}

TEST(StateDict, EraseWhileIteratingVisitsTheRest) {
  StateDict sd;
  for (int i = 0; i < 10; ++i) sd.insert_or_assign(std::to_string(i), value(i));
  std::vector<std::string> seen;
  for (auto& [key, tensor] : sd) {
    seen.push_back(key);
    if (key != "9") sd.erase(std::to_string(std::stoi(key) + 1));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "2", "4", "6", "8"}));
  EXPECT_EQ(sd.keys(), seen);
}

TEST(StateDict, ManyErasuresKeepLookupsAndOrderRight) {
  // Enough churn to make the tombstone sweep run several times.
  StateDict sd;
  std::vector<std::string> expected;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 200; ++i) {
      sd.insert_or_assign(fmt::format("r{}.{}", round, i), value(i));
    }
    for (int i = 0; i < 200; ++i) {
      if (i % 3 != 0) sd.erase(fmt::format("r{}.{}", round, i));
    }
  }
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 200; i += 3) {
      expected.push_back(fmt::format("r{}.{}", round, i));
    }
  }
  EXPECT_EQ(sd.keys(), expected);
  EXPECT_EQ(sd.size(), expected.size());
  for (const auto& key : expected) {
    ASSERT_TRUE(sd.contains(key)) << key;
    EXPECT_EQ(sd.at(key).item<double>(), std::stoi(key.substr(key.find('.') + 1)));
  }
}

TEST(StateDict, FindGivesTheEntryOrEnd) {
  StateDict sd;
  sd.insert_or_assign("a", value(1));
  sd.insert_or_assign("b", value(2));
  auto it = sd.find("b");
  ASSERT_NE(it, sd.end());
  EXPECT_EQ(it->first, "b");
  EXPECT_EQ(it->second.item<double>(), 2);
  EXPECT_EQ(sd.find("z"), sd.end());
  const StateDict& const_sd = sd;
  EXPECT_EQ(const_sd.find("a")->first, "a");
}

TEST(StateDict, CopiesShareTensorsButNotEntries) {
  StateDict sd;
  sd.insert_or_assign("w", value(1));
  StateDict copy = sd;
  copy.erase("w");
  copy.insert_or_assign("v", value(2));
  EXPECT_TRUE(sd.contains("w"));
  EXPECT_FALSE(sd.contains("v"));
  StateDict alias = sd;
  alias.at("w").fill_(3);
  EXPECT_EQ(sd.at("w").item<double>(), 3);  // like Python's dict.copy(): same tensor objects
}

TEST(StateDict, MetadataIsAnOrderedMapOfPrefixes) {
  StateDict sd;
  sd.metadata().insert_or_assign("", {{"version", 1}});
  sd.metadata().insert_or_assign("bn", {{"version", 2}});
  sd.metadata().insert_or_assign("0", {});
  EXPECT_EQ(sd.metadata().keys(), (std::vector<std::string>{"", "bn", "0"}));
  EXPECT_EQ(sd.metadata().at("bn").at("version"), 2);
  EXPECT_TRUE(sd.metadata().at("0").empty());
  EXPECT_ERROR(sd.metadata().at("missing"), KeyError, "state.state_dict.missing_key");
  const StateDict copy = sd;
  EXPECT_EQ(copy.metadata().size(), 3u);
}

TEST(StateDict, ClearEmptiesEverything) {
  StateDict sd;
  sd.insert_or_assign("a", value(1));
  sd.erase("a");
  sd.insert_or_assign("b", value(1));
  sd.clear();
  EXPECT_TRUE(sd.empty());
  EXPECT_EQ(sd.begin(), sd.end());
  sd.insert_or_assign("c", value(1));
  EXPECT_EQ(sd.keys(), std::vector<std::string>{"c"});
}

}  // namespace
