// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
/// The unpickler's parts: unpickler.cpp, the opcode machine; this header, its value type;
/// pickle_budget.h, its one budget; pickle_objects.h, what its opcodes make; pickle_convert.h,
/// the conversions of its result. A namespace of their own keeps their shared types' short names
/// clear of the rest of detail and of the other sources of a unity build's unit.
namespace pickle {

/// Deep enough for a state dict (dict -> _metadata -> module -> value, tensor argument tuples)
/// and a training checkpoint (dict -> optimizer -> state -> parameter -> tensor); the bound
/// keeps destruction and conversion of nested values from recursing without limit.
constexpr int kMaxPickleDepth = 32;

/// The callables and classes a pickle may name: those of state dicts, and the other types on
/// Python's weights-only allow-list that have an IValue counterpart.
enum class Global : std::uint8_t {
  kOrderedDict,
  kCounter,  // collections.Counter(dict): loads as the dict
  kSize,     // torch.Size(tuple): loads as the tuple
  kDevice,   // torch.device(type[, index])
  kComplex,  // builtins.complex(real, imag)
  kRebuildTensorV2,
  kRebuildTensorV3,
  kRebuildParameter,
  kStorageClass,    // torch.FloatStorage and its siblings; `dtype` says which
  kUntypedStorage,  // torch.UntypedStorage: bytes, typed by the dtype argument of v3
  kDtype,           // torch.float32 and its siblings
};

/// kUnset marks a memo slot that no PUT has filled.
enum class Tag : std::uint8_t {
  kUnset,
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kTuple,
  kList,
  kDict,
  kComplex,  // `items` holds the real and imaginary parts as two kFloat values
  kDevice,   // `number` holds the c10::Device's type and index (device_bits)
  kGlobal,
  kStorage,
  kTensor
};

/// The Python name of a tag, for error texts ("a tuple, not an int").
const char* tag_name(Tag tag);

/// A pickled string, shared by every Value that holds it (memo copies), as Python's are.
struct Str {
  std::size_t refs = 1;
  std::string text;
};

struct Container;

/// One object on the pickle machine's stack or in its memo: a tag and one word, 16 bytes, so
/// that the cheapest opcodes (NONE, BINGET: one or two bytes) cost as little as they can. Copies
/// share strings, containers, storages and tensors, as Python references do.
class Value {
 public:
  Tag tag = Tag::kNone;
  Global global = Global::kOrderedDict;                // kGlobal; kStorage: which class made it
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kGlobal storage class or dtype, kStorage
  union {
    std::int64_t number = 0;     // kBool, kInt, kDevice
    double real;                 // kFloat
    Str* text;                   // kStr
    Container* items;            // kTuple, kList, kDict, kComplex
    c10::StorageImpl* storage_;  // kStorage
    c10::TensorImpl* tensor_;    // kTensor
  };

  Value() = default;
  Value(const Value& other) : tag(other.tag), global(other.global), dtype(other.dtype) {
    number = other.number;
    retain();
  }
  Value(Value&& other) noexcept : tag(other.tag), global(other.global), dtype(other.dtype) {
    number = other.number;
    other.tag = Tag::kNone;
  }
  Value& operator=(Value other) noexcept {
    std::swap(tag, other.tag);
    std::swap(global, other.global);
    std::swap(dtype, other.dtype);
    std::swap(number, other.number);
    return *this;
  }
  ~Value() { release(); }

  /// Scalars own nothing, so they are made without the budget; strings, containers, storages
  /// and tensors are made by PickleObjects, which charges them.
  static Value of_int(std::int64_t n) {
    Value v;
    v.tag = Tag::kInt;
    v.number = n;
    return v;
  }
  static Value of_bool(bool b) {
    Value v;
    v.tag = Tag::kBool;
    v.number = b;
    return v;
  }
  static Value of_float(double d) {
    Value v;
    v.tag = Tag::kFloat;
    v.real = d;
    return v;
  }
  static Value of_storage(c10::Storage storage) {
    Value v;
    v.tag = Tag::kStorage;
    v.storage_ = storage.unsafeReleaseStorageImpl();
    return v;
  }
  static Value of_tensor(at::Tensor tensor) {
    Value v;
    v.tag = Tag::kTensor;
    v.tensor_ = tensor.unsafeReleaseTensorImpl();
    return v;
  }

  static Value unset() {
    Value v;
    v.tag = Tag::kUnset;
    return v;
  }

  bool is_container() const {
    return tag == Tag::kTuple || tag == Tag::kList || tag == Tag::kDict || tag == Tag::kComplex;
  }
  const std::string& str() const { return text->text; }
  c10::Storage storage() const {
    c10::raw::intrusive_ptr::incref(storage_);
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage_));
  }
  at::Tensor tensor() const {
    c10::raw::intrusive_ptr::incref(tensor_);
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim(tensor_));
  }

 private:
  void retain();
  void release();
};
static_assert(sizeof(Value) == 16, "a Value is a tag and one word");

/// A tuple or list (items) or dict (keys and values alternating, in insertion order).
///
/// `sealed` is set once the container is placed inside another one; a sealed container can no
/// longer change. Pickles build a container's contents before nesting it, so this costs nothing
/// for real files, and it makes reference cycles impossible: a cycle needs an insertion into a
/// container that is already nested below the inserted one.
struct Container {
  std::size_t refs = 1;
  std::vector<Value> items;
  Value metadata;  // an OrderedDict's `_metadata` attribute (a dict), set by BUILD
  int depth = 1;
  bool sealed = false;
};

/// Inline: every copy of a Value (a push, a BINGET, a memo PUT) runs them.
inline void Value::retain() {
  if (tag == Tag::kStr) {
    ++text->refs;
  } else if (is_container()) {
    ++items->refs;
  } else if (tag == Tag::kStorage) {
    c10::raw::intrusive_ptr::incref(storage_);
  } else if (tag == Tag::kTensor) {
    c10::raw::intrusive_ptr::incref(tensor_);
  }
}

inline void Value::release() {
  if (tag == Tag::kStr) {
    if (--text->refs == 0) delete text;
  } else if (is_container()) {
    // Recursion is bounded by kMaxPickleDepth.
    if (--items->refs == 0) delete items;
  } else if (tag == Tag::kStorage) {
    c10::raw::intrusive_ptr::decref(storage_);
  } else if (tag == Tag::kTensor) {
    c10::raw::intrusive_ptr::decref(tensor_);
  }
  tag = Tag::kNone;
}

/// A dict key for an error message: the string itself, or the number.
std::string key_text(const Value& key);

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
