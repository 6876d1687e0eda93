// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/checkpoint/object.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_dict.h"
#include "test_util.h"

namespace {

using c10::IValue;
using modhooks::StateDict;

std::string fixture(const std::string& name) {
  return std::string(MODHOOKS_FIXTURES) + "/objects/" + name;
}

c10::impl::GenericDict checkpoint() {
  return modhooks::load_object(fixture("checkpoint.pt")).toGenericDict();
}

IValue at(const c10::impl::GenericDict& d, const std::string& key) { return d.at(IValue(key)); }

std::vector<std::string> keys_of(const c10::impl::GenericDict& d) {
  std::vector<std::string> keys;
  for (const auto& entry : d) keys.push_back(entry.key().toStringRef());
  return keys;
}

TEST(LoadObject, ReadsATrainingCheckpointPythonWrote) {
  const auto ckpt = checkpoint();
  EXPECT_EQ(keys_of(ckpt).front(), "model");
  EXPECT_EQ(keys_of(ckpt).size(), 23u);
  EXPECT_EQ(at(ckpt, "epoch").toInt(), 3);
  EXPECT_DOUBLE_EQ(at(ckpt, "loss").toDouble(), 0.25);
  EXPECT_EQ(at(ckpt, "name").toStringRef(), "run-\xc3\xa9");
  EXPECT_TRUE(at(ckpt, "nothing").isNone());
  EXPECT_EQ(at(ckpt, "big").toInt(), std::int64_t{1} << 40);
  EXPECT_EQ(at(ckpt, "negative").toInt(), -5);
  const auto flags = at(ckpt, "flags").toBoolList();
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_TRUE(flags.get(0));
  EXPECT_FALSE(flags.get(1));

  // The model's OrderedDict: a dict of names to tensors in Python's order.
  const StateDict model = StateDict::from(at(ckpt, "model"));
  EXPECT_EQ(model.keys(), (std::vector<std::string>{
                              "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                              "1.running_var", "1.num_batches_tracked", "2.weight", "2.bias"}));
  EXPECT_TRUE(model.metadata().empty());
  EXPECT_EQ(model.at("1.num_batches_tracked").item<std::int64_t>(), 2);

  // The optimizer: int keys, lists, tuples, tensors.
  const auto optimizer = at(ckpt, "optimizer").toGenericDict();
  const auto state = at(optimizer, "state").toGenericDict();
  EXPECT_EQ(state.size(), 6u);
  const auto first = state.at(IValue(std::int64_t{0})).toGenericDict();
  EXPECT_EQ(keys_of(first), (std::vector<std::string>{"step", "exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(at(first, "step").toTensor().item<float>(), 2.0f);
  const auto groups = at(optimizer, "param_groups").toList();
  ASSERT_EQ(groups.size(), 1u);
  const auto group = groups.get(0).toGenericDict();
  EXPECT_DOUBLE_EQ(at(group, "lr").toDouble(), 0.01);
  const auto& betas = at(group, "betas").toTupleRef().elements();
  EXPECT_DOUBLE_EQ(betas[1].toDouble(), 0.999);
  EXPECT_TRUE(at(group, "foreach").isNone());
  EXPECT_EQ(at(group, "params").toIntVector(), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(LoadObject, ReadsEveryKindOfValue) {
  const auto ckpt = checkpoint();
  const auto& tuple = at(ckpt, "tuple").toTupleRef().elements();
  ASSERT_EQ(tuple.size(), 3u);
  EXPECT_EQ(tuple[0].toInt(), 1);
  EXPECT_EQ(tuple[1].toStringRef(), "a");
  EXPECT_DOUBLE_EQ(tuple[2].toDouble(), 2.5);
  const auto& size = at(ckpt, "size").toTupleRef().elements();
  ASSERT_EQ(size.size(), 2u);
  EXPECT_EQ(size[1].toInt(), 3);
  EXPECT_EQ(at(ckpt, "cpu").toDevice(), c10::Device(c10::kCPU));
  EXPECT_EQ(at(ckpt, "cuda1").toDevice(), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(at(ckpt, "dtype").toScalarType(), c10::kHalf);
  EXPECT_EQ(at(ckpt, "complex").toComplexDouble(), c10::complex<double>(1.5, -2.0));
  const auto int_keys = at(ckpt, "int_keys").toGenericDict();
  std::vector<std::int64_t> ints;
  for (const auto& entry : int_keys) ints.push_back(entry.key().toInt());
  EXPECT_EQ(ints, (std::vector<std::int64_t>{0, 7, -3}));
  EXPECT_EQ(int_keys.at(IValue(std::int64_t{-3})).toStringRef(), "minus three");
  EXPECT_EQ(at(at(ckpt, "counter").toGenericDict(), "a").toInt(), 2);
  EXPECT_EQ(keys_of(at(ckpt, "ordered").toGenericDict()), (std::vector<std::string>{"z", "a"}));
  const auto empty = at(ckpt, "empty").toGenericDict();
  EXPECT_EQ(at(empty, "list").toListRef().size(), 0u);
  EXPECT_EQ(at(empty, "dict").toGenericDict().size(), 0u);
  EXPECT_EQ(at(empty, "tuple").toTupleRef().elements().size(), 0u);
  const auto nested = at(at(ckpt, "nested").toGenericDict(), "a").toList();
  const auto deepest = nested.get(1).toList().get(1).toList().get(1).toGenericDict();
  EXPECT_TRUE(at::equal(at(deepest, "b").toTensor(), at::ones({2}, at::kBFloat16)));
}

TEST(LoadObject, ViewsShareTheirStorageAndSharedObjectsStayShared) {
  const auto ckpt = checkpoint();
  const auto views = at(ckpt, "views").toTensorVector();
  ASSERT_EQ(views.size(), 3u);
  EXPECT_TRUE(at::equal(views[0], at::arange(12, at::kFloat)));
  EXPECT_TRUE(at::equal(views[1], at::arange(2, 8, at::kFloat).view({2, 3})));
  EXPECT_EQ(views[2].stride(0), 4);
  EXPECT_TRUE(views[0].storage().is_alias_of(views[1].storage()));
  EXPECT_TRUE(views[0].storage().is_alias_of(views[2].storage()));
  const auto same = at(ckpt, "same").toTensorVector();
  EXPECT_TRUE(same[0].is_same(same[1]));
  const auto shared = at(ckpt, "shared").toList();
  EXPECT_TRUE(shared.get(0).is(shared.get(1)));
}

TEST(LoadObject, RefusesWhatIValuesCannotHoldNamingTheFile) {
  const std::string deep = expect_error<modhooks::FormatError>(
      [] { modhooks::load_object(fixture("deep.pt")); }, "checkpoint.pickle.too_deep");
  EXPECT_NE(deep.find("deep.pt"), std::string::npos) << deep;
  EXPECT_NE(deep.find("nest deeper than 32 levels"), std::string::npos) << deep;
  const std::string set = expect_error<modhooks::FormatError>(
      [] { modhooks::load_object(fixture("set.pt")); }, "checkpoint.pickle.refused_global");
  EXPECT_NE(set.find("set' is not allowed"), std::string::npos) << set;
  const std::string bytes = expect_error<modhooks::FormatError>(
      [] { modhooks::load_object(fixture("bytes.pt")); }, "checkpoint.pickle.refused_global");
  EXPECT_NE(bytes.find("_codecs.encode' is not allowed"), std::string::npos) << bytes;
}

TEST(LoadObject, LoadStillRefusesATrainingCheckpoint) {
  const std::string text = expect_error<modhooks::TypeError>(
      [] { modhooks::load(fixture("checkpoint.pt")); }, "checkpoint.load.not_a_state_dict");
  EXPECT_NE(text.find("state dict entry 'model' is a dict, not a tensor"), std::string::npos)
      << text;
}

/// The fixture `name` loads whole, and every prefix of it from `first` bytes on, in steps of
/// `step`, raises FormatError.
void expect_every_truncation_fails(const std::string& name, std::size_t first, std::size_t step) {
  std::ifstream in(fixture(name), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_NO_THROW(modhooks::detail::load_object_from_bytes(bytes));
  for (std::size_t n = first; n < bytes.size(); n += step) {
    EXPECT_THROW(modhooks::detail::load_object_from_bytes(std::string_view(bytes).substr(0, n)),
                 modhooks::FormatError)
        << n;
  }
}

TEST(LoadObject, EveryTruncationFailsCleanly) {
  expect_every_truncation_fails("checkpoint.pt", 0, 7);
}

/// Deep equality of loaded objects; tensors by dtype, shape and values.
bool same_object(const IValue& a, const IValue& b) {
  if (a.tagKind() != b.tagKind()) return false;
  if (a.isTensor()) {
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() &&
           x.strides() == y.strides() && at::equal(x, y);
  }
  if (a.isGenericDict()) {
    const auto x = a.toGenericDict();
    const auto y = b.toGenericDict();
    if (x.size() != y.size()) return false;
    auto i = x.begin();
    auto j = y.begin();
    for (; i != x.end(); ++i, ++j) {
      if (!same_object(i->key(), j->key()) || !same_object(i->value(), j->value())) return false;
    }
    return true;
  }
  if (a.isList() || a.isTuple()) {
    const auto x = a.isList() ? a.toListRef() : c10::ArrayRef<IValue>(a.toTupleRef().elements());
    const auto y = b.isList() ? b.toListRef() : c10::ArrayRef<IValue>(b.toTupleRef().elements());
    if (x.size() != y.size()) return false;
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (!same_object(x[k], y[k])) return false;
    }
    return true;
  }
  return a == b;
}

TEST(LoadObject, ReadsTheLegacyFormat) {
  // The same checkpoint written by _use_new_zipfile_serialization=False.
  const IValue legacy = modhooks::load_object(fixture("legacy_checkpoint.pt"));
  EXPECT_TRUE(same_object(legacy, modhooks::load_object(fixture("checkpoint.pt"))));
  const auto views = at(legacy.toGenericDict(), "views").toTensorVector();
  EXPECT_TRUE(views[0].storage().is_alias_of(views[1].storage()));

  // load reads a legacy state dict, with its _metadata.
  const StateDict sd = modhooks::load(fixture("legacy_state_dict.pt"));
  const StateDict zip = StateDict::from(at(checkpoint(), "model"));
  ASSERT_EQ(sd.keys(), zip.keys());
  for (const auto& [key, tensor] : zip) EXPECT_TRUE(at::equal(sd.at(key), tensor)) << key;
  EXPECT_EQ(sd.metadata().at("1").at("version"), 2);

  // A big-endian writer's bytes come back swapped.
  const StateDict big = modhooks::load(fixture("legacy_big_endian.pt"));
  EXPECT_TRUE(at::equal(big.at("w"), at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(big.at("i"), at::arange(1, 3, at::kLong)));
}

TEST(LoadObject, EveryTruncationOfALegacyFileFailsCleanly) {
  expect_every_truncation_fails("legacy_checkpoint.pt", 16, 5);
}

TEST(StateDictFrom, TakesMappingsOfNamesToTensorsOnly) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("b", at::ones({2}));
  dict.insert("a", at::arange(3));
  const StateDict sd = StateDict::from(IValue(dict));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(sd.at("a").is_same(dict.at("a").toTensor()));

  const IValue back = sd.to_ivalue();
  EXPECT_EQ(keys_of(back.toGenericDict()), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(back.toGenericDict().at("b").toTensor().is_same(sd.at("b")));

  EXPECT_ERROR_WITH(StateDict::from(IValue(3)), TypeError, "state.state_dict.not_a_dict",
                    "StateDict::from: the value is a Int");
  dict.insert("epoch", 3);
  EXPECT_ERROR_WITH(StateDict::from(IValue(dict)), TypeError, "state.state_dict.entry_not_tensor",
                    "entry 'epoch' is a Int, not a tensor");
  c10::impl::GenericDict ints(c10::IntType::get(), c10::TensorType::get());
  ints.insert(IValue(std::int64_t{0}), at::ones({1}));
  EXPECT_ERROR_WITH(StateDict::from(IValue(ints)), TypeError, "state.state_dict.key_not_str",
                    "a key is a Int, not a str");
}

TEST(SaveObject, WritesWhatPythonReads) {
  const std::string dir = std::string(MODHOOKS_FIXTURES) + "/objects/";
  c10::impl::GenericDict values(c10::StringType::get(), c10::AnyType::get());
  values.insert("none", IValue());
  values.insert("true", true);
  values.insert("int", -(std::int64_t{1} << 40));
  values.insert("float", 0.1);
  values.insert("str", "h\xc3\xa9llo");
  values.insert("complex", c10::complex<double>(1, -1));
  values.insert("cpu", c10::Device(c10::kCPU));
  values.insert("cuda", c10::Device(c10::kCUDA, 2));
  values.insert("tuple",
                c10::ivalue::Tuple::create(1, c10::ivalue::Tuple::create(2.5, std::string("x"))));
  values.insert("list", c10::List<std::int64_t>({1, 2, 3}));
  c10::impl::GenericDict int_keys(c10::IntType::get(), c10::StringType::get());
  int_keys.insert(IValue(std::int64_t{3}), "three");
  int_keys.insert(IValue(std::int64_t{-1}), "minus one");
  values.insert("int_keys", int_keys);
  values.insert("tensor", at::arange(6, at::kFloat).view({2, 3}));
  values.insert("bf16", at::tensor({1.5, -2.0}).to(at::kBFloat16));
  values.insert("grad", at::ones({2}).requires_grad_());
  c10::impl::GenericDict empty(c10::StringType::get(), c10::AnyType::get());
  empty.insert("list", c10::impl::GenericList(c10::AnyType::get()));
  empty.insert("dict", c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  empty.insert("tuple", c10::ivalue::Tuple::create(std::vector<IValue>{}));
  values.insert("empty", empty);

  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("values", values);
  const at::Tensor once = at::ones({3});
  top.insert("twice", c10::List<at::Tensor>({once, once}));
  c10::impl::GenericList dicts(c10::AnyType::get());
  dicts.push_back(int_keys);
  dicts.push_back(int_keys);
  top.insert("dicts", dicts);
  top.insert("transposed", at::arange(6, at::kFloat).view({2, 3}).t());
  // A storage on its own, twice, as load_object returns one (a fuzz finding: save_object
  // refused it, though Python reads it).
  const c10::Storage storage = at::arange(3, at::kFloat).storage();
  top.insert("storage", c10::ivalue::Tuple::create(storage, storage));
  modhooks::save_object(top, dir + "cpp_values.pt");

  // Python's checkpoint through load_object and save_object: what Python reads back.
  modhooks::save_object(modhooks::load_object(fixture("checkpoint.pt")), dir + "cpp_checkpoint.pt");
  const std::string command = std::string("\"") + MODHOOKS_PYTHON + "\" \"" +
                              MODHOOKS_TEST_SOURCE_DIR + "/python/check_cpp_objects.py\" \"" + dir +
                              "\"";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;

  // And modhooks reads its own file back.
  const auto again = modhooks::load_object(dir + "cpp_values.pt").toGenericDict();
  const auto twice = at(again, "twice").toTensorVector();
  EXPECT_TRUE(twice[0].is_same(twice[1]));
  EXPECT_EQ(at(at(again, "values").toGenericDict(), "cuda").toDevice(), c10::Device(c10::kCUDA, 2));
  const auto storages = at(again, "storage").toTupleRef().elements();
  ASSERT_EQ(storages[0].toStorage().nbytes(), storage.nbytes());
  EXPECT_EQ(std::memcmp(storages[0].toStorage().data(), storage.data(), storage.nbytes()), 0);
  EXPECT_TRUE(storages[0].toStorage().is_alias_of(storages[1].toStorage()));
}

TEST(SaveObject, RefusesWhatPythonCouldNotReadBackBeforeWriting) {
  const std::string path = std::string(MODHOOKS_FIXTURES) + "/objects/refused.pt";
  std::remove(path.c_str());
  c10::impl::GenericList cycle(c10::AnyType::get());
  cycle.push_back(1);
  cycle.push_back(cycle);
  EXPECT_ERROR_WITH(modhooks::save_object(cycle, path), ValueError, "checkpoint.save.cycle",
                    "object[1] contains itself");
  cycle.clear();  // reference counting cannot free a cycle (LeakSanitizer reports it)

  IValue deep = c10::impl::GenericList(c10::AnyType::get());
  for (int i = 0; i < 32; ++i) {
    c10::impl::GenericList outer(c10::AnyType::get());
    outer.push_back(deep);
    deep = outer;
  }
  EXPECT_ERROR_WITH(modhooks::save_object(deep, path), ValueError, "checkpoint.save.too_deep",
                    "nests deeper than 32 levels");

  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("undefined", at::Tensor());
  EXPECT_ERROR_WITH(modhooks::save_object(dict, path), ValueError,
                    "checkpoint.save.undefined_tensor", "is an undefined tensor");
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(SaveObject, SafetensorsPathsTakeAStateDict) {
  const std::string path = std::string(MODHOOKS_FIXTURES) + "/objects/cpp.safetensors";
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("w", at::arange(4, at::kFloat));
  modhooks::save_object(dict, path);
  const auto back = modhooks::load_object(path).toGenericDict();
  EXPECT_TRUE(at::equal(at(back, "w").toTensor(), at::arange(4, at::kFloat)));
  dict.insert("epoch", 1);
  EXPECT_ERROR_WITH(modhooks::save_object(dict, path), TypeError,
                    "state.state_dict.entry_not_tensor", "entry 'epoch' is a Int, not a tensor");
}

}  // namespace
