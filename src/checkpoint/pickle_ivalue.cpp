// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The pickle machine's result as an IValue (unpickle_object), charged at upper bounds of what
// libtorch allocates for it.
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/version.h"
#include "pickle_convert.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {
namespace {

/// What libtorch allocates for IValue containers beyond their items, upper bounds: a ListImpl or
/// DictImpl with its element types, a Tuple, a ConstantString, a ComplexHolder.
constexpr std::uint64_t kIValueObjectBytes = 128;
/// A GenericDict entry: the ordered hash map keeps key, value, distance and its two links in a
/// slot array of at most four slots per entry when reserved for its size.
constexpr std::uint64_t kIValueDictEntryBytes = std::uint64_t{4} * 64;

/// The IValue type of items[first], items[first + step], ... when they are all ints, floats,
/// bools, strings or all tensors; AnyType when they differ or are of other kinds; `empty` for
/// no items.
c10::TypePtr uniform_type(const std::vector<Value>& items, std::size_t first, std::size_t step,
                          c10::TypePtr empty) {
  if (first >= items.size()) return empty;
  const Tag tag = items[first].tag;
  for (std::size_t i = first; i < items.size(); i += step) {
    if (items[i].tag != tag) return c10::AnyType::get();
  }
  switch (tag) {
    case Tag::kInt:
      return c10::IntType::get();
    case Tag::kFloat:
      return c10::FloatType::get();
    case Tag::kBool:
      return c10::BoolType::get();
    case Tag::kStr:
      return c10::StringType::get();
    case Tag::kTensor:
      return c10::TensorType::get();
    default:
      return c10::AnyType::get();
  }
}

/// Converts one result, remembering the strings and containers it refers to more than once.
class IValueConverter {
 public:
  explicit IValueConverter(PickleBudget& budget) : budget_(budget) {}
  c10::IValue to_ivalue(const Value& v);

 private:
  c10::IValue container_to_ivalue(const Value& v);

  PickleBudget& budget_;
  /// IValues of the containers the object refers to more than once, so that each is converted
  /// once and stays one object, shared, as Python's are.
  std::unordered_map<const Container*, c10::IValue> converted_;
  std::unordered_map<const Str*, c10::IValue> converted_strings_;
};

c10::IValue IValueConverter::to_ivalue(const Value& v) {
  switch (v.tag) {
    case Tag::kUnset:
    case Tag::kNone:
      return c10::IValue();
    case Tag::kBool:
      return c10::IValue(v.number != 0);
    case Tag::kInt:
      return c10::IValue(v.number);
    case Tag::kFloat:
      return c10::IValue(v.real);
    case Tag::kStr: {
      // A string the object holds more than once (a memoized key) becomes one shared
      // ConstantString, not a copy per place: a long string referred to again and again would
      // otherwise be copied as often.
      const bool shared = v.text->refs > 1;
      if (shared) {
        auto found = converted_strings_.find(v.text);
        if (found != converted_strings_.end()) return found->second;
      }
      budget_.charge(kIValueObjectBytes + v.str().size() + 1);
      c10::IValue out(v.str());
      if (shared) {
        budget_.charge(sizeof(decltype(converted_strings_)::value_type) + kHashEntryBytes);
        converted_strings_.emplace(v.text, out);
      }
      return out;
    }
    case Tag::kDevice:
      return c10::IValue(
          c10::Device(static_cast<c10::DeviceType>(v.number >> 16),
                      static_cast<c10::DeviceIndex>(static_cast<std::int16_t>(v.number & 0xffff))));
    case Tag::kStorage:
      return c10::IValue(v.storage());
    case Tag::kTensor:
      return c10::IValue(v.tensor());
    case Tag::kGlobal:
      // A dtype stands as the int of its ScalarType, which is what IValue(ScalarType) holds
      // and IValue::toScalarType() reads.
      if (v.global == Global::kDtype) return c10::IValue(v.dtype);
      fail<FormatError>("checkpoint.pickle.global_as_value",
                        "the object holds a class or function (a pickle global) as a value");
    case Tag::kTuple:
    case Tag::kList:
    case Tag::kDict:
    case Tag::kComplex:
      break;
  }
  // Only a container the object refers to more than once is remembered: each is converted once
  // (a chain of shared containers would otherwise be converted exponentially often) and stays
  // one shared object.
  const bool shared = v.items->refs > 1;
  if (shared) {
    auto found = converted_.find(v.items);
    if (found != converted_.end()) return found->second;
  }
  c10::IValue out = container_to_ivalue(v);
  if (shared) {
    budget_.charge(sizeof(decltype(converted_)::value_type) + kHashEntryBytes);
    converted_.emplace(v.items, out);
  }
  return out;
}

c10::IValue IValueConverter::container_to_ivalue(const Value& v) {
  const std::vector<Value>& items = v.items->items;
  if (v.tag == Tag::kComplex) {
    budget_.charge(kIValueObjectBytes);
    return c10::IValue(c10::complex<double>(items[0].real, items[1].real));
  }
  if (v.tag == Tag::kDict) {
    // Key and value types from the entries, so that typed views (toTypedDict<std::string,
    // at::Tensor>) of a state dict work; mixed entries give AnyType.
    const c10::TypePtr key_type = uniform_type(items, 0, 2, c10::StringType::get());
    const c10::TypePtr value_type = uniform_type(items, 1, 2, c10::AnyType::get());
    budget_.charge(kIValueObjectBytes);
    budget_.charge_array(items.size() / 2, kIValueDictEntryBytes);
    c10::impl::GenericDict dict(key_type, value_type);
    dict.reserve(items.size() / 2);
    for (std::size_t i = 0; i < items.size(); i += 2) {
      dict.insert_or_assign(to_ivalue(items[i]), to_ivalue(items[i + 1]));
    }
    return c10::IValue(dict);
  }
  budget_.charge(kIValueObjectBytes);
  budget_.charge_items<c10::IValue>(items.size());
  if (v.tag == Tag::kTuple) {
    // The vector moves into the tuple (or its items into the tuple's inline slots).
    std::vector<c10::IValue> converted;
    converted.reserve(items.size());
    for (const Value& item : items) converted.push_back(to_ivalue(item));
    return c10::IValue(c10::ivalue::Tuple::create(std::move(converted)));
  }
  // A list of one kind of item gets that element type, so toIntList() and its siblings work.
  const c10::TypePtr element_type = uniform_type(items, 0, 1, c10::AnyType::get());
  c10::impl::GenericList list(element_type);
  list.reserve(items.size());
  for (const Value& item : items) list.push_back(to_ivalue(item));
  return c10::IValue(list);
}

}  // namespace

c10::IValue ivalue_of(const Value& result, PickleBudget& budget) {
  return IValueConverter(budget).to_ivalue(result);
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
