// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "unpickler.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/empty.h>
#include <c10/core/Device.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "dtypes.h"
#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// Deep enough for a state dict (dict -> _metadata -> module -> value, tensor argument tuples)
/// and a training checkpoint (dict -> optimizer -> state -> parameter -> tensor); the bound
/// keeps destruction and conversion of nested values from recursing without limit.
constexpr int kMaxPickleDepth = 32;

/// What libtorch allocates for one tensor beside its TensorImpl, in bytes (its version counter);
/// an upper bound, which tests/load_memory_test.cpp checks against a flood of tensors.
constexpr std::uint64_t kTensorExtraBytes = 64;

/// Gives `bytes` back to a budget when it goes out of scope: for temporaries freed by then.
struct Refund {
  std::uint64_t& budget;
  std::uint64_t bytes = 0;
  ~Refund() { budget += bytes; }
};

/// A hash table entry's bytes beyond its value: the node's link and cached hash, and the bucket
/// array, which is up to twice as large as the table and held twice while it is rehashed.
constexpr std::uint64_t kHashEntryBytes = 16 + 32;

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
enum class Kind : std::uint8_t {
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

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kUnset:
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kComplex:
      return "complex";
    case Kind::kDevice:
      return "device";
    case Kind::kGlobal:
      return "global";
    case Kind::kStorage:
      return "storage";
    case Kind::kTensor:
      return "tensor";
  }
  return "?";
}

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
  Kind kind = Kind::kNone;
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
  Value(const Value& other) : kind(other.kind), global(other.global), dtype(other.dtype) {
    number = other.number;
    retain();
  }
  Value(Value&& other) noexcept : kind(other.kind), global(other.global), dtype(other.dtype) {
    number = other.number;
    other.kind = Kind::kNone;
  }
  Value& operator=(Value other) noexcept {
    std::swap(kind, other.kind);
    std::swap(global, other.global);
    std::swap(dtype, other.dtype);
    std::swap(number, other.number);
    return *this;
  }
  ~Value() { release(); }

  static Value of_storage(c10::Storage storage) {
    Value v;
    v.kind = Kind::kStorage;
    v.storage_ = storage.unsafeReleaseStorageImpl();
    return v;
  }
  static Value of_tensor(at::Tensor tensor) {
    Value v;
    v.kind = Kind::kTensor;
    v.tensor_ = tensor.unsafeReleaseTensorImpl();
    return v;
  }

  static Value unset() {
    Value v;
    v.kind = Kind::kUnset;
    return v;
  }

  bool is_container() const {
    return kind == Kind::kTuple || kind == Kind::kList || kind == Kind::kDict ||
           kind == Kind::kComplex;
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

void Value::retain() {
  switch (kind) {
    case Kind::kStr:
      ++text->refs;
      break;
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kComplex:
      ++items->refs;
      break;
    case Kind::kStorage:
      c10::raw::intrusive_ptr::incref(storage_);
      break;
    case Kind::kTensor:
      c10::raw::intrusive_ptr::incref(tensor_);
      break;
    default:
      break;
  }
}

void Value::release() {
  switch (kind) {
    case Kind::kStr:
      if (--text->refs == 0) delete text;
      break;
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kComplex:
      // Recursion is bounded by kMaxPickleDepth.
      if (--items->refs == 0) delete items;
      break;
    case Kind::kStorage:
      c10::raw::intrusive_ptr::decref(storage_);
      break;
    case Kind::kTensor:
      c10::raw::intrusive_ptr::decref(tensor_);
      break;
    default:
      break;
  }
  kind = Kind::kNone;
}

/// A dict key for an error message: the string itself, or the number.
std::string key_text(const Value& key) {
  switch (key.kind) {
    case Kind::kStr:
      return key.str();
    case Kind::kInt:
    case Kind::kBool:
      return std::to_string(key.number);
    case Kind::kFloat:
      return std::to_string(key.real);
    default:
      return std::string("a ") + kind_name(key.kind);
  }
}

class Unpickler {
 public:
  Unpickler(std::string_view data, const StorageLoader& load_storage, std::uint64_t budget,
            const std::string& budget_rule)
      : data_(data),
        load_storage_(load_storage),
        budget_(budget),
        budget_limit_(budget),
        budget_rule_(budget_rule) {}

  /// The state dict the pickle describes.
  StateDict state_dict() { return to_state_dict(run()); }
  /// The object the pickle describes, as an IValue.
  c10::IValue object();
  /// After state_dict() or object(): where the pickle's STOP ended and the budget left.
  PickleEnd end() const { return PickleEnd{pos_, budget_}; }

 private:
  /// Runs the pickle to its STOP and returns its object; the stack and memo are freed by then,
  /// so a container's reference count says how often the object refers to it.
  Value run();

  /// A pickle that cannot be read is a FormatError: `id` says what is wrong, the text where.
  [[noreturn]] void error(const char* id, const std::string& message) const {
    fail<FormatError>(id, "data.pkl offset " + std::to_string(op_offset_) + ": " + message);
  }

  // --- reading the byte stream
  std::string_view take(std::uint64_t n) {
    if (n > data_.size() - pos_) {
      error("checkpoint.pickle.truncated", "truncated: needs " + std::to_string(n) + " bytes, " +
                                               std::to_string(data_.size() - pos_) + " remain");
    }
    std::string_view out = data_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  std::uint64_t read_uint(int n) {
    return load_le(reinterpret_cast<const unsigned char*>(take(static_cast<unsigned>(n)).data()),
                   n);
  }
  std::string_view read_line() {
    std::size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos)
      error("checkpoint.pickle.truncated", "truncated: GLOBAL name lacks its newline");
    std::string_view line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  // --- the stack
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Value pop() {
    if (stack_.size() <= floor()) error("checkpoint.pickle.malformed", "stack underflow");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= floor()) error("checkpoint.pickle.malformed", "stack underflow");
    return stack_.back();
  }
  void push(Value v) {
    make_room(stack_, 1);
    stack_.push_back(std::move(v));
  }
  void memoize(std::uint64_t index);

  /// Counts an allocation of `bytes` against the budget, before it is made. Every allocation is
  /// charged in full; only an allocation known to be freed already (a vector's old buffer, a
  /// temporary) is refunded, so what the load holds at any moment stays within the budget.
  /// Objects that the memo, a container or the stack may still reach are never refunded.
  void charge(std::uint64_t bytes) {
    if (bytes > budget_) {
      error("checkpoint.pickle.over_budget",
            "the pickle's objects and tensor data would take more than the " +
                std::to_string(budget_limit_) + " bytes a load of this file may hold (" +
                budget_rule_ + ")");
    }
    budget_ -= bytes;
  }
  /// Lets `v` take `n` more items, growing it by doubling, as push_back would, but charged.
  template <class T>
  void make_room(std::vector<T>& v, std::uint64_t n) {
    if (v.capacity() - v.size() >= n) return;
    std::uint64_t wanted = std::max<std::uint64_t>({v.size() + n, 2 * v.capacity(), 8});
    const std::uint64_t old_capacity = v.capacity();
    charge_items<T>(wanted);
    v.reserve(static_cast<std::size_t>(wanted));
    budget_ += old_capacity * sizeof(T);  // the old buffer, freed by reserve
  }
  /// Charges an array of `n` items of T, refusing counts whose size overflows.
  template <class T>
  void charge_items(std::uint64_t n) {
    std::uint64_t bytes = 0;
    if (mul_overflows(n, sizeof(T), &bytes)) charge(~std::uint64_t{0});
    charge(bytes);
  }

  /// The items pushed since the last MARK, which is dropped.
  std::vector<Value> pop_to_mark() {
    if (marks_.empty()) error("checkpoint.pickle.malformed", "no MARK to pop to");
    std::size_t mark = marks_.back();
    marks_.pop_back();
    charge_items<Value>(stack_.size() - mark);
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + mark),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  // --- values
  Value make_str(std::string_view bytes);
  Value make_int(std::int64_t n) {
    Value v;
    v.kind = Kind::kInt;
    v.number = n;
    return v;
  }
  Value make_bool(bool b) {
    Value v;
    v.kind = Kind::kBool;
    v.number = b;
    return v;
  }
  Value make_float(double d) {
    Value v;
    v.kind = Kind::kFloat;
    v.real = d;
    return v;
  }
  Value make_tuple(std::vector<Value> items);
  Value make_container(Kind kind) {
    charge(sizeof(Container));
    Value v;
    v.items = new Container();
    v.kind = kind;
    return v;
  }
  Value make_dict() { return make_container(Kind::kDict); }
  /// Puts `child` inside `parent`: seals the child and keeps the depth bound.
  void nest(Container& parent, const Value& child);
  void set_item(Value& dict, Value key, Value value);
  void append(Value& list, Value value);

  // --- opcodes with meaning
  Value resolve_global(std::string_view module, std::string_view name);
  Value reduce(const Value& callable, const Value& args);
  Value rebuild_tensor(const std::vector<Value>& args, bool v3);
  Value rebuild_parameter(const std::vector<Value>& args);
  Value persistent_load(const Value& pid);
  Value make_device(const std::vector<Value>& args);
  Value make_complex(const std::vector<Value>& args);
  void build(Value& target, const Value& state);
  StateDict to_state_dict(const Value& result);
  /// One integer of a module's metadata, `value` at the place `where` names in error texts.
  void add_metadata(Metadata& md, const std::string& where, const std::string& name,
                    const Value& value);
  c10::IValue to_ivalue(const Value& v);
  c10::IValue container_to_ivalue(const Value& v);
  /// IValues of the containers the object refers to more than once, so that each is converted
  /// once and stays one object, shared, as Python's are.
  std::unordered_map<const Container*, c10::IValue> converted_;
  std::unordered_map<const Str*, c10::IValue> converted_strings_;

  /// A tensor: its TensorImpl and what libtorch allocates beside it, sizes and strides beyond the
  /// five dimensions a TensorImpl keeps inline, autograd's metadata when it requires grad.
  void charge_tensor(std::uint64_t dim, bool requires_grad) {
    std::uint64_t bytes = sizeof(c10::TensorImpl) + kTensorExtraBytes;
    if (dim > 5) bytes += 2 * sizeof(std::int64_t) * dim;
    if (requires_grad) bytes += sizeof(torch::autograd::AutogradMeta);
    charge(bytes);
  }
  /// One entry of an OrderedMap (StateDict, its metadata) that holds `value_bytes` per slot: the
  /// slot, which doubling may hold three times over while it grows, the index's hash entry, and
  /// the key twice.
  void charge_entry(const std::string& key, std::uint64_t value_bytes) {
    charge(3 * (sizeof(std::string) + value_bytes + 8) + sizeof(std::string) + 8 + kHashEntryBytes +
           2 * (key.size() + 1));
  }

  // --- argument checks
  std::int64_t expect_int(const Value& v, const char* what) {
    if (v.kind != Kind::kInt)
      error("checkpoint.pickle.bad_object",
            std::string(what) + " is a " + kind_name(v.kind) + ", not an int");
    return v.number;
  }
  std::vector<std::int64_t> expect_int_tuple(const Value& v, const char* what);
  void expect_no_hooks(const Value& v) {
    if (v.kind != Kind::kDict || !v.items->items.empty()) {
      error("checkpoint.pickle.bad_object",
            "backward hooks must be an empty OrderedDict, not a " + std::string(kind_name(v.kind)));
    }
  }

  std::string_view data_;
  const StorageLoader& load_storage_;
  std::uint64_t budget_;
  const std::uint64_t budget_limit_;
  const std::string& budget_rule_;
  std::size_t pos_ = 0;
  std::size_t op_offset_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  /// Indexed by memo index: pickles number their memo 0, 1, 2, ... An index far beyond that
  /// makes a vector the budget refuses.
  std::vector<Value> memo_;
  std::uint64_t memo_count_ = 0;  // slots set: Python's len(memo), which MEMOIZE uses
  struct Loaded {
    std::string key;
    c10::Storage storage;
    c10::ScalarType dtype;
  };
  std::unordered_map<std::string, Loaded> storages_;  // by record name: the key, case-folded
};

Value Unpickler::make_str(std::string_view bytes) {
  // Python's unpickler decodes with "surrogatepass", so encoded surrogates are accepted too.
  if (!is_utf8(bytes, /*surrogates=*/true))
    error("checkpoint.pickle.bad_string", "string is not valid UTF-8");
  // libstdc++ keeps up to 15 characters inside the string.
  charge(sizeof(Str) + (bytes.size() > 15 ? bytes.size() + 1 : 0));
  Value v;
  v.text = new Str{1, std::string(bytes)};
  v.kind = Kind::kStr;
  return v;
}

Value Unpickler::make_tuple(std::vector<Value> items) {
  charge(sizeof(Container));
  Value v;
  v.items = new Container();
  v.kind = Kind::kTuple;
  for (const Value& item : items) nest(*v.items, item);
  v.items->items = std::move(items);
  v.items->sealed = true;
  return v;
}

void Unpickler::memoize(std::uint64_t index) {
  const Value& value = top();
  if (index >= memo_.size()) {
    // Grown as a vector grows, by doubling, so that numbering 0, 1, 2, ... costs 16 bytes a
    // slot amortized; the new slots are unset.
    make_room(memo_, index + 1 - memo_.size());
    memo_.resize(static_cast<std::size_t>(index) + 1, Value::unset());
  }
  if (memo_[index].kind == Kind::kUnset) ++memo_count_;
  memo_[index] = value;
}

void Unpickler::nest(Container& parent, const Value& child) {
  if (!child.is_container()) return;
  if (child.items == &parent) error("checkpoint.pickle.cycle", "a container cannot contain itself");
  child.items->sealed = true;
  parent.depth = std::max(parent.depth, child.items->depth + 1);
  if (parent.depth > kMaxPickleDepth) {
    error("checkpoint.pickle.too_deep",
          "objects nest deeper than " + std::to_string(kMaxPickleDepth) + " levels");
  }
}

void Unpickler::set_item(Value& dict, Value key, Value value) {
  if (dict.kind != Kind::kDict)
    error("checkpoint.pickle.malformed", "SETITEM on a " + std::string(kind_name(dict.kind)));
  if (dict.items->sealed)
    error("checkpoint.pickle.malformed",
          "SETITEM on a dict that is already nested in another object");
  // The key types IValue dicts can hash; a state dict's keys must be str (to_state_dict).
  if (key.kind != Kind::kStr && key.kind != Kind::kInt && key.kind != Kind::kBool &&
      key.kind != Kind::kFloat) {
    error("checkpoint.pickle.bad_object",
          "dict key is a " + std::string(kind_name(key.kind)) + ", not a str, int, float or bool");
  }
  nest(*dict.items, value);
  make_room(dict.items->items, 2);
  dict.items->items.push_back(std::move(key));
  dict.items->items.push_back(std::move(value));
}

void Unpickler::append(Value& list, Value value) {
  if (list.kind != Kind::kList)
    error("checkpoint.pickle.malformed", "APPEND to a " + std::string(kind_name(list.kind)));
  if (list.items->sealed)
    error("checkpoint.pickle.malformed",
          "APPEND to a list that is already nested in another object");
  nest(*list.items, value);
  make_room(list.items->items, 1);
  list.items->items.push_back(std::move(value));
}

std::vector<std::int64_t> Unpickler::expect_int_tuple(const Value& v, const char* what) {
  if (v.kind != Kind::kTuple) {
    error("checkpoint.pickle.bad_object",
          std::string(what) + " is a " + kind_name(v.kind) + ", not a tuple");
  }
  std::vector<std::int64_t> out;
  charge_items<std::int64_t>(v.items->items.size());
  out.reserve(v.items->items.size());
  for (const Value& item : v.items->items) {
    std::int64_t n = expect_int(item, what);
    if (n < 0)
      error("checkpoint.pickle.bad_object",
            std::string(what) + " holds the negative value " + std::to_string(n));
    out.push_back(n);
  }
  return out;
}

Value Unpickler::resolve_global(std::string_view module, std::string_view name) {
  Value v;
  v.kind = Kind::kGlobal;
  if (module == "collections" && name == "OrderedDict") {
    v.global = Global::kOrderedDict;
    return v;
  }
  if (module == "collections" && name == "Counter") {
    v.global = Global::kCounter;
    return v;
  }
  // Python 3 writes builtins under their Python 2 module name in protocol 2.
  if ((module == "builtins" || module == "__builtin__") && name == "complex") {
    v.global = Global::kComplex;
    return v;
  }
  if (module == "torch" && name == "Size") {
    v.global = Global::kSize;
    return v;
  }
  if (module == "torch" && name == "device") {
    v.global = Global::kDevice;
    return v;
  }
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor_v2") {
      v.global = Global::kRebuildTensorV2;
      return v;
    }
    if (name == "_rebuild_tensor_v3") {
      v.global = Global::kRebuildTensorV3;
      return v;
    }
    if (name == "_rebuild_parameter") {
      v.global = Global::kRebuildParameter;
      return v;
    }
  }
  if (module == "torch" || module == "torch.storage") {
    if (name == "UntypedStorage") {
      v.global = Global::kUntypedStorage;
      v.dtype = c10::ScalarType::Byte;
      return v;
    }
  }
  if (module == "torch") {
    if (const DtypeNames* d = find_dtype_by_storage_class(name)) {
      v.global = Global::kStorageClass;
      v.dtype = d->type;
      return v;
    }
    if (const DtypeNames* d = find_dtype_by_torch_name(name)) {
      v.global = Global::kDtype;
      v.dtype = d->type;
      return v;
    }
    if (is_newer_dtype_name(name)) {
      error("checkpoint.pickle.unsupported_dtype", "dtype 'torch." + std::string(name) +
                                                       "' is not one this libtorch (" +
                                                       TORCH_VERSION + ") has");
    }
  }
  error(
      "checkpoint.pickle.refused_global",
      "global '" + std::string(module) + "." + std::string(name) +
          "' is not allowed: modhooks reads dicts, OrderedDicts, Counters, lists, tuples, tensors, "
          "numbers, strings, None, torch.Size, torch.device and dtypes");
}

Value Unpickler::persistent_load(const Value& pid) {
  // The legacy format adds view_metadata, None since storages have no views.
  if (pid.kind != Kind::kTuple || (pid.items->items.size() != 5 && pid.items->items.size() != 6)) {
    error("checkpoint.pickle.bad_storage",
          "persistent id is not a ('storage', type, key, location, numel) tuple");
  }
  const auto& f = pid.items->items;
  if (f.size() == 6 && f[5].kind != Kind::kNone) {
    error("checkpoint.pickle.storage_view",
          "persistent id names a view of a storage (view_metadata), which is not supported");
  }
  if (f[0].kind != Kind::kStr || f[0].str() != "storage") {
    error("checkpoint.pickle.bad_storage", "persistent id does not start with 'storage'");
  }
  if (f[1].kind != Kind::kGlobal ||
      (f[1].global != Global::kStorageClass && f[1].global != Global::kUntypedStorage)) {
    error("checkpoint.pickle.bad_storage", "persistent id names no storage type");
  }
  if (f[2].kind != Kind::kStr)
    error("checkpoint.pickle.bad_storage", "storage key is a " + std::string(kind_name(f[2].kind)));
  if (f[3].kind != Kind::kStr) {
    error("checkpoint.pickle.bad_storage",
          "storage location is a " + std::string(kind_name(f[3].kind)));
  }
  const std::int64_t numel = expect_int(f[4], "storage size");
  if (numel < 0) error("checkpoint.pickle.bad_storage", "storage size is negative");
  const std::string& key = f[2].str();
  // Zip readers stop a record's name at a NUL byte and miniz compares names ignoring ASCII case,
  // so "0\0x" or "A" and "a" would load one record twice, as two storages.
  if (key.find('\0') != std::string::npos)
    error("checkpoint.pickle.bad_storage", "storage key contains a NUL byte");
  // The folded copy is made once per BINPERSID; its heap block (beyond 15 characters) counts.
  charge(key.size() > 15 ? key.size() + 1 : 0);
  std::string record = key;
  for (char& c : record) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  const Global storage_class = f[1].global;
  const c10::ScalarType dtype = f[1].dtype;
  auto found = storages_.find(record);
  if (found != storages_.end()) {
    if (found->second.key != key) {
      error("checkpoint.pickle.bad_storage",
            "storage keys '" + found->second.key + "' and '" + key + "' name the same record");
    }
    // torch.save checks that views of a storage share its dtype, except for empty storages.
    if (found->second.dtype != dtype && found->second.storage.nbytes() != 0) {
      error("checkpoint.pickle.bad_storage", "storage '" + key + "' is used as " +
                                                 c10::toString(found->second.dtype) + " and as " +
                                                 c10::toString(dtype));
    }
    Value v = Value::of_storage(found->second.storage);
    v.global = storage_class;
    v.dtype = dtype;
    return v;
  }
  // The storage's bytes (a record's size must equal them, or loading it fails) and its
  // StorageImpl, then its entry in storages_: a hash node holding the key twice, and the
  // bucket array, which rehashing may hold twice over for a moment.
  std::uint64_t nbytes = 0;
  if (mul_overflows(static_cast<std::uint64_t>(numel), c10::elementSize(dtype), &nbytes)) {
    error("checkpoint.torch_save.storage_overflow",
          "storage '" + key + "' of " + std::to_string(numel) + " elements overflows");
  }
  charge(nbytes);
  charge(sizeof(c10::StorageImpl) + sizeof(decltype(storages_)::value_type) + kHashEntryBytes +
         2 * (key.size() + 1));
  c10::Storage storage = load_storage_(key, dtype, static_cast<std::uint64_t>(numel));
  storages_.emplace(std::move(record), Loaded{key, storage, dtype});
  Value v = Value::of_storage(std::move(storage));
  v.global = storage_class;
  v.dtype = dtype;
  return v;
}

Value Unpickler::rebuild_tensor(const std::vector<Value>& args, bool v3) {
  // v2: (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
  // v3: the same with the dtype after backward_hooks, for an UntypedStorage.
  const std::size_t base = v3 ? 7 : 6;
  const char* fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
  if (args.size() != base && args.size() != base + 1) {
    error("checkpoint.pickle.bad_tensor", std::string(fn) + " takes " + std::to_string(base) +
                                              " or " + std::to_string(base + 1) +
                                              " arguments, got " + std::to_string(args.size()));
  }
  const Value& storage_arg = args[0];
  if (storage_arg.kind != Kind::kStorage) {
    error("checkpoint.pickle.bad_tensor",
          std::string(fn) + " expects a storage, got a " + kind_name(storage_arg.kind));
  }
  const c10::Storage storage = storage_arg.storage();
  c10::ScalarType dtype = storage_arg.dtype;
  if (v3) {
    if (storage_arg.global != Global::kUntypedStorage) {
      error("checkpoint.pickle.bad_tensor", "_rebuild_tensor_v3 expects an UntypedStorage");
    }
    if (args[6].kind != Kind::kGlobal || args[6].global != Global::kDtype) {
      error("checkpoint.pickle.bad_tensor",
            "_rebuild_tensor_v3 expects a dtype as its seventh argument");
    }
    dtype = args[6].dtype;
  } else if (storage_arg.global != Global::kStorageClass) {
    error("checkpoint.pickle.bad_tensor", "_rebuild_tensor_v2 expects a typed storage");
  }
  const std::int64_t offset = expect_int(args[1], "storage offset");
  if (offset < 0) error("checkpoint.pickle.bad_tensor", "storage offset is negative");
  // Declared first, so that it gives their bytes back after the two vectors are freed.
  Refund refund{budget_};
  const std::vector<std::int64_t> sizes = expect_int_tuple(args[2], "tensor size");
  const std::vector<std::int64_t> strides = expect_int_tuple(args[3], "tensor stride");
  refund.bytes = (sizes.capacity() + strides.capacity()) * sizeof(std::int64_t);
  if (sizes.size() != strides.size()) {
    error("checkpoint.pickle.bad_tensor", "tensor has " + std::to_string(sizes.size()) +
                                              " sizes but " + std::to_string(strides.size()) +
                                              " strides");
  }
  if (args[4].kind != Kind::kBool)
    error("checkpoint.pickle.bad_tensor", "requires_grad is not a bool");
  expect_no_hooks(args[5]);
  if (args.size() == base + 1) {
    const Value& meta = args[base];
    if (meta.kind != Kind::kDict)
      error("checkpoint.pickle.bad_tensor", "tensor metadata is not a dict");
    for (std::size_t i = 1; i < meta.items->items.size(); i += 2) {
      const Value& flag = meta.items->items[i];
      if (flag.kind != Kind::kBool || flag.number != 0) {
        error("checkpoint.pickle.bad_tensor",
              "tensor metadata '" + key_text(meta.items->items[i - 1]) +
                  "' (a conjugate or negative view) is not supported");
      }
    }
  }
  // The last element the view reaches must lie in the storage; checked here, with overflow
  // checks, before ATen sees the numbers.
  const std::uint64_t itemsize = c10::elementSize(dtype);
  std::uint64_t last = static_cast<std::uint64_t>(offset);
  bool empty = false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) empty = true;
  }
  if (!empty) {
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      std::uint64_t reach = 0;
      if (mul_overflows(static_cast<std::uint64_t>(sizes[d] - 1),
                        static_cast<std::uint64_t>(strides[d]), &reach) ||
          add_overflows(last, reach, &last) || last > INT64_MAX) {
        error("checkpoint.pickle.bad_tensor", "tensor size and stride overflow");
      }
    }
    std::uint64_t needed = 0;
    if (add_overflows(last, 1, &needed) || mul_overflows(needed, itemsize, &needed) ||
        needed > storage.nbytes()) {
      error("checkpoint.pickle.bad_tensor",
            "tensor of size " + c10::str(c10::IntArrayRef(sizes)) + ", stride " +
                c10::str(c10::IntArrayRef(strides)) + " at offset " + std::to_string(offset) +
                " reaches beyond its storage of " + std::to_string(storage.nbytes()) + " bytes");
    }
  }
  const bool requires_grad = args[4].number != 0;
  if (requires_grad && !c10::isFloatingType(dtype) && !c10::isComplexType(dtype)) {
    error("checkpoint.pickle.bad_tensor",
          "a " + std::string(c10::toString(dtype)) + " tensor cannot require grad");
  }
  charge_tensor(sizes.size(), requires_grad);
  charge(sizeof(c10::StorageImpl));  // at::empty's, which set_ replaces and frees
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype));
  t.set_(storage, offset, sizes, strides);
  budget_ += sizeof(c10::StorageImpl);
  if (requires_grad) t.set_requires_grad(true);
  return Value::of_tensor(std::move(t));
}

Value Unpickler::rebuild_parameter(const std::vector<Value>& args) {
  // (data, requires_grad, backward_hooks): a Parameter is a tensor that may require grad.
  if (args.size() != 3) {
    error("checkpoint.pickle.bad_tensor",
          "_rebuild_parameter takes 3 arguments, got " + std::to_string(args.size()));
  }
  if (args[0].kind != Kind::kTensor) {
    error("checkpoint.pickle.bad_tensor",
          "_rebuild_parameter expects a tensor, got a " + std::string(kind_name(args[0].kind)));
  }
  if (args[1].kind != Kind::kBool)
    error("checkpoint.pickle.bad_tensor", "requires_grad is not a bool");
  expect_no_hooks(args[2]);
  // A new tensor on the same storage, as Python's Parameter(data) is: the data may be memoized
  // and stand under another key too, whose requires_grad must not change.
  const at::Tensor data = args[0].tensor();
  const bool requires_grad = args[1].number != 0;
  if (requires_grad && !c10::isFloatingType(data.scalar_type()) &&
      !c10::isComplexType(data.scalar_type())) {
    error("checkpoint.pickle.bad_tensor",
          "a " + std::string(c10::toString(data.scalar_type())) + " parameter cannot require grad");
  }
  charge_tensor(static_cast<std::uint64_t>(data.dim()), requires_grad);
  at::Tensor t = data.detach();
  t.set_requires_grad(requires_grad);
  return Value::of_tensor(std::move(t));
}

Value Unpickler::make_device(const std::vector<Value>& args) {
  // torch.device.__reduce__ gives (device, (type,)) or (device, (type, index)).
  if (args.empty() || args.size() > 2 || args[0].kind != Kind::kStr) {
    error("checkpoint.pickle.bad_object", "torch.device takes a type name and an optional index");
  }
  std::string spec = args[0].str();
  if (args.size() == 2) spec += ":" + std::to_string(expect_int(args[1], "device index"));
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(spec);
  } catch (const c10::Error&) {
    error("checkpoint.pickle.unknown_device",
          "'" + spec + "' is not a device this libtorch (" + TORCH_VERSION + ") knows");
  }
  Value v;
  v.kind = Kind::kDevice;
  v.number = (static_cast<std::int64_t>(device.type()) << 16) |
             static_cast<std::uint16_t>(static_cast<std::int16_t>(device.index()));
  return v;
}

Value Unpickler::make_complex(const std::vector<Value>& args) {
  if (args.size() != 2)
    error("checkpoint.pickle.bad_object", "complex takes a real and an imaginary part");
  std::vector<Value> parts;
  charge_items<Value>(2);
  parts.reserve(2);
  for (const Value& part : args) {
    if (part.kind == Kind::kFloat) {
      parts.push_back(part);
    } else if (part.kind == Kind::kInt) {
      parts.push_back(make_float(static_cast<double>(part.number)));
    } else {
      error("checkpoint.pickle.bad_object",
            "a part of a complex number is a " + std::string(kind_name(part.kind)));
    }
  }
  Value v = make_container(Kind::kComplex);
  v.items->items = std::move(parts);
  v.items->sealed = true;
  return v;
}

Value Unpickler::reduce(const Value& callable, const Value& args) {
  if (callable.kind != Kind::kGlobal) {
    error("checkpoint.pickle.bad_object",
          "REDUCE calls a " + std::string(kind_name(callable.kind)));
  }
  if (args.kind != Kind::kTuple)
    error("checkpoint.pickle.bad_object", "REDUCE arguments are not a tuple");
  const std::vector<Value>& a = args.items->items;
  switch (callable.global) {
    case Global::kOrderedDict:
      if (!a.empty())
        error("checkpoint.pickle.bad_object",
              "OrderedDict is built from arguments; only OrderedDict() is allowed");
      return make_dict();
    case Global::kCounter:
      // Counter.__reduce__ gives (Counter, (dict(self),)).
      if (a.empty()) return make_dict();
      if (a.size() != 1 || a[0].kind != Kind::kDict)
        error("checkpoint.pickle.bad_object", "Counter takes one dict");
      return a[0];
    case Global::kSize:
      if (a.size() != 1) error("checkpoint.pickle.bad_object", "torch.Size takes one tuple");
      expect_int_tuple(a[0], "torch.Size");
      return a[0];
    case Global::kDevice:
      return make_device(a);
    case Global::kComplex:
      return make_complex(a);
    case Global::kRebuildTensorV2:
      return rebuild_tensor(a, false);
    case Global::kRebuildTensorV3:
      return rebuild_tensor(a, true);
    case Global::kRebuildParameter:
      return rebuild_parameter(a);
    case Global::kStorageClass:
    case Global::kUntypedStorage:
    case Global::kDtype:
      break;
  }
  error("checkpoint.pickle.bad_object", "a storage type or dtype cannot be called");
}

void Unpickler::build(Value& target, const Value& state) {
  // Python sets `_metadata` on the OrderedDict by BUILD with the state {'_metadata': ...}.
  if (target.kind != Kind::kDict || target.items->sealed) {
    error("checkpoint.pickle.bad_object", "BUILD on a " + std::string(kind_name(target.kind)) +
                                              "; only an OrderedDict's _metadata can be set");
  }
  if (state.kind != Kind::kDict)
    error("checkpoint.pickle.bad_object", "BUILD state is a " + std::string(kind_name(state.kind)));
  const auto& items = state.items->items;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    if (items[i].kind != Kind::kStr || items[i].str() != "_metadata") {
      error("checkpoint.pickle.bad_object",
            "BUILD sets the attribute '" + key_text(items[i]) + "'; only _metadata is allowed");
    }
    if (items[i + 1].kind != Kind::kDict)
      error("checkpoint.pickle.bad_object", "_metadata is not a dict");
    nest(*target.items, items[i + 1]);
    target.items->metadata = items[i + 1];
  }
}

void Unpickler::add_metadata(Metadata& md, const std::string& where, const std::string& name,
                             const Value& value) {
  if (value.kind != Kind::kInt && value.kind != Kind::kBool) {
    fail<TypeError>("checkpoint.load.bad_metadata",
                    where + " is a " + kind_name(value.kind) + ", not an int");
  }
  // A tree node: three links and a colour, the key and the value, the key's heap block.
  charge(4 * sizeof(void*) + sizeof(std::string) + sizeof(std::int64_t) + name.size() + 1);
  md[name] = value.number;
}

StateDict Unpickler::to_state_dict(const Value& result) {
  if (result.kind != Kind::kDict) {
    fail<TypeError>("checkpoint.load.not_a_state_dict",
                    "data.pkl holds a " + std::string(kind_name(result.kind)) +
                        ", not a state dict (an OrderedDict of tensors)");
  }
  StateDict sd;
  const auto& items = result.items->items;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    if (items[i].kind != Kind::kStr) {
      fail<TypeError>(
          "checkpoint.load.not_a_state_dict",
          "state dict key is a " + std::string(kind_name(items[i].kind)) + ", not a str");
    }
    const std::string& key = items[i].str();
    if (items[i + 1].kind != Kind::kTensor) {
      fail<TypeError>(
          "checkpoint.load.not_a_state_dict",
          "state dict entry '" + key + "' is a " + kind_name(items[i + 1].kind) + ", not a tensor");
    }
    charge_entry(key, sizeof(at::Tensor));
  }
  sd.reserve(items.size() / 2);
  for (std::size_t i = 0; i < items.size(); i += 2) {
    sd.insert_or_assign(items[i].str(), items[i + 1].tensor());
  }
  if (const Value& metadata = result.items->metadata; metadata.kind == Kind::kDict) {
    for (std::size_t i = 0; i < metadata.items->items.size(); i += 2) {
      const Value& prefix_key = metadata.items->items[i];
      if (prefix_key.kind != Kind::kStr)
        fail<TypeError>("checkpoint.load.bad_metadata",
                        "_metadata key " + key_text(prefix_key) + " is not a str");
      const std::string& prefix = prefix_key.str();
      const Value& entry = metadata.items->items[i + 1];
      if (entry.kind != Kind::kDict) {
        fail<TypeError>("checkpoint.load.bad_metadata", "_metadata['" + prefix + "'] is a " +
                                                            kind_name(entry.kind) + ", not a dict");
      }
      charge_entry(prefix, sizeof(Metadata));
      Metadata md;
      for (std::size_t j = 0; j < entry.items->items.size(); j += 2) {
        const Value& name_key = entry.items->items[j];
        if (name_key.kind != Kind::kStr) {
          fail<TypeError>("checkpoint.load.bad_metadata", "_metadata['" + prefix + "'] key " +
                                                              key_text(name_key) + " is not a str");
        }
        const std::string& name = name_key.str();
        const Value& value = entry.items->items[j + 1];
        if (value.kind == Kind::kDict) {
          // One level of nesting, as spectral_norm writes it ({'spectral_norm':
          // {'weight.version': 1}}): flattened to "spectral_norm/weight.version".
          for (std::size_t k = 0; k < value.items->items.size(); k += 2) {
            const Value& inner_key = value.items->items[k];
            const Value& inner = value.items->items[k + 1];
            const std::string where = "_metadata['" + prefix + "']['" + name + "']";
            if (inner_key.kind != Kind::kStr) {
              fail<TypeError>("checkpoint.load.bad_metadata",
                              where + " key " + key_text(inner_key) + " is not a str");
            }
            add_metadata(md, where + "['" + inner_key.str() + "']",
                         name + kNestedMetadataSeparator + inner_key.str(), inner);
          }
          continue;
        }
        add_metadata(md, "_metadata['" + prefix + "']['" + name + "']", name, value);
      }
      sd.metadata().insert_or_assign(prefix, std::move(md));
    }
  }
  return sd;
}

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
  const Kind kind = items[first].kind;
  for (std::size_t i = first; i < items.size(); i += step) {
    if (items[i].kind != kind) return c10::AnyType::get();
  }
  switch (kind) {
    case Kind::kInt:
      return c10::IntType::get();
    case Kind::kFloat:
      return c10::FloatType::get();
    case Kind::kBool:
      return c10::BoolType::get();
    case Kind::kStr:
      return c10::StringType::get();
    case Kind::kTensor:
      return c10::TensorType::get();
    default:
      return c10::AnyType::get();
  }
}

c10::IValue Unpickler::object() {
  Value result = run();
  return to_ivalue(result);
}

c10::IValue Unpickler::to_ivalue(const Value& v) {
  switch (v.kind) {
    case Kind::kUnset:
    case Kind::kNone:
      return c10::IValue();
    case Kind::kBool:
      return c10::IValue(v.number != 0);
    case Kind::kInt:
      return c10::IValue(v.number);
    case Kind::kFloat:
      return c10::IValue(v.real);
    case Kind::kStr: {
      // A string the object holds more than once (a memoized key) becomes one shared
      // ConstantString, not a copy per place: a long string referred to again and again would
      // otherwise be copied as often.
      const bool shared = v.text->refs > 1;
      if (shared) {
        auto found = converted_strings_.find(v.text);
        if (found != converted_strings_.end()) return found->second;
      }
      charge(kIValueObjectBytes + v.str().size() + 1);
      c10::IValue out(v.str());
      if (shared) {
        charge(sizeof(decltype(converted_strings_)::value_type) + kHashEntryBytes);
        converted_strings_.emplace(v.text, out);
      }
      return out;
    }
    case Kind::kDevice:
      return c10::IValue(
          c10::Device(static_cast<c10::DeviceType>(v.number >> 16),
                      static_cast<c10::DeviceIndex>(static_cast<std::int16_t>(v.number & 0xffff))));
    case Kind::kStorage:
      return c10::IValue(v.storage());
    case Kind::kTensor:
      return c10::IValue(v.tensor());
    case Kind::kGlobal:
      // A dtype stands as the int of its ScalarType, which is what IValue(ScalarType) holds
      // and IValue::toScalarType() reads.
      if (v.global == Global::kDtype) return c10::IValue(v.dtype);
      fail<FormatError>("checkpoint.pickle.global_as_value",
                        "the object holds a class or function (a pickle global) as a value");
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kComplex:
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
    charge(sizeof(decltype(converted_)::value_type) + kHashEntryBytes);
    converted_.emplace(v.items, out);
  }
  return out;
}

c10::IValue Unpickler::container_to_ivalue(const Value& v) {
  const std::vector<Value>& items = v.items->items;
  if (v.kind == Kind::kComplex) {
    charge(kIValueObjectBytes);
    return c10::IValue(c10::complex<double>(items[0].real, items[1].real));
  }
  if (v.kind == Kind::kDict) {
    // Key and value types from the entries, so that typed views (toTypedDict<std::string,
    // at::Tensor>) of a state dict work; mixed entries give AnyType.
    const c10::TypePtr key_type = uniform_type(items, 0, 2, c10::StringType::get());
    const c10::TypePtr value_type = uniform_type(items, 1, 2, c10::AnyType::get());
    charge(kIValueObjectBytes);
    std::uint64_t entries = 0;
    if (mul_overflows(items.size() / 2, kIValueDictEntryBytes, &entries)) charge(~0ULL);
    charge(entries);
    c10::impl::GenericDict dict(key_type, value_type);
    dict.reserve(items.size() / 2);
    for (std::size_t i = 0; i < items.size(); i += 2) {
      dict.insert_or_assign(to_ivalue(items[i]), to_ivalue(items[i + 1]));
    }
    return c10::IValue(dict);
  }
  charge(kIValueObjectBytes);
  charge_items<c10::IValue>(items.size());
  if (v.kind == Kind::kTuple) {
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

Value Unpickler::run() {
  while (pos_ < data_.size()) {
    op_offset_ = pos_;
    const auto op = static_cast<unsigned char>(data_[pos_++]);
    switch (op) {
      case 0x80: {  // PROTO
        const std::uint64_t version = read_uint(1);
        if (version < 2 || version > 5)
          error("checkpoint.pickle.unsupported_protocol",
                "pickle protocol " + std::to_string(version));
        break;
      }
      case 0x95:  // FRAME: a length hint for buffered readers; the data follows inline
        read_uint(8);
        break;
      case '.': {  // STOP
        Value result = pop();
        const std::uint64_t freed = (stack_.capacity() + memo_.capacity()) * sizeof(Value) +
                                    marks_.capacity() * sizeof(std::size_t);
        std::vector<Value>().swap(stack_);
        std::vector<Value>().swap(memo_);
        std::vector<std::size_t>().swap(marks_);
        budget_ += freed;
        return result;
      }
      case '(':  // MARK
        make_room(marks_, 1);
        marks_.push_back(stack_.size());
        break;
      case 'N':  // NONE
        push(Value());
        break;
      case 0x88:  // NEWTRUE
        push(make_bool(true));
        break;
      case 0x89:  // NEWFALSE
        push(make_bool(false));
        break;
      case 'G': {  // BINFLOAT: big-endian IEEE 754 double
        std::uint64_t bits = 0;
        for (const char c : take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
        double d = 0;
        std::memcpy(&d, &bits, sizeof d);
        push(make_float(d));
        break;
      }
      case 'J':  // BININT: signed 32-bit
        push(make_int(static_cast<std::int32_t>(read_uint(4))));
        break;
      case 'K':  // BININT1
        push(make_int(static_cast<std::int64_t>(read_uint(1))));
        break;
      case 'M':  // BININT2
        push(make_int(static_cast<std::int64_t>(read_uint(2))));
        break;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const auto n = static_cast<int>(read_uint(1));
        if (n > 8)
          error("checkpoint.pickle.bad_object",
                "integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
        std::uint64_t bits = n == 0 ? 0 : read_uint(n);
        if (n > 0 && n < 8 && (bits >> (8 * n - 1)) != 0) bits |= ~std::uint64_t{0} << (8 * n);
        push(make_int(static_cast<std::int64_t>(bits)));
        break;
      }
      case 'X':  // BINUNICODE
        push(make_str(take(read_uint(4))));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push(make_str(take(read_uint(1))));
        break;
      case 0x8d:  // BINUNICODE8
        push(make_str(take(read_uint(8))));
        break;
      case ')':  // EMPTY_TUPLE
        push(make_tuple({}));
        break;
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        charge_items<Value>(op - 0x84);
        std::vector<Value> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        push(make_tuple(std::move(items)));
        break;
      }
      case 't':  // TUPLE
        push(make_tuple(pop_to_mark()));
        break;
      case '}':  // EMPTY_DICT
        push(make_dict());
        break;
      case ']':  // EMPTY_LIST
        push(make_container(Kind::kList));
        break;
      case 'l': {  // LIST
        std::vector<Value> items = pop_to_mark();
        Value list = make_container(Kind::kList);
        for (const Value& item : items) nest(*list.items, item);
        list.items->items = std::move(items);
        push(std::move(list));
        break;
      }
      case 'a': {  // APPEND
        Value value = pop();
        append(top(), std::move(value));
        break;
      }
      case 'e': {  // APPENDS
        std::vector<Value> items = pop_to_mark();
        Value& list = top();
        for (Value& item : items) append(list, std::move(item));
        const std::uint64_t bytes = items.capacity() * sizeof(Value);
        std::vector<Value>().swap(items);
        budget_ += bytes;  // the temporary list, freed; its items live on in the list
        break;
      }
      case 's': {  // SETITEM
        Value value = pop();
        Value key = pop();
        set_item(top(), std::move(key), std::move(value));
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<Value> items = pop_to_mark();
        if (items.size() % 2 != 0)
          error("checkpoint.pickle.malformed", "SETITEMS with an odd number of items");
        Value& dict = top();
        for (std::size_t i = 0; i < items.size(); i += 2) {
          set_item(dict, std::move(items[i]), std::move(items[i + 1]));
        }
        const std::uint64_t bytes = items.capacity() * sizeof(Value);
        std::vector<Value>().swap(items);
        budget_ += bytes;  // the temporary list, freed; its items live on in the dict
        break;
      }
      case 'c': {  // GLOBAL
        std::string_view module = read_line();
        std::string_view name = read_line();
        push(resolve_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Value name = pop();
        Value module = pop();
        if (module.kind != Kind::kStr || name.kind != Kind::kStr) {
          error("checkpoint.pickle.malformed", "STACK_GLOBAL needs two strings");
        }
        push(resolve_global(module.str(), name.str()));
        break;
      }
      case 'R': {  // REDUCE
        Value args = pop();
        Value callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD
        Value state = pop();
        build(top(), state);
        break;
      }
      case 'Q': {  // BINPERSID
        Value pid = pop();
        push(persistent_load(pid));
        break;
      }
      case 'q':  // BINPUT
        memoize(read_uint(1));
        break;
      case 'r':  // LONG_BINPUT
        memoize(read_uint(4));
        break;
      case 0x94:  // MEMOIZE
        memoize(memo_count_);
        break;
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const std::uint64_t index = read_uint(op == 'h' ? 1 : 4);
        if (index >= memo_.size() || memo_[index].kind == Kind::kUnset) {
          error("checkpoint.pickle.malformed", "memo index " + std::to_string(index) + " is unset");
        }
        push(memo_[index]);
        break;
      }
      default: {
        static const char* hex = "0123456789abcdef";
        error("checkpoint.pickle.unsupported_opcode",
              std::string("pickle opcode 0x") + hex[op >> 4] + hex[op & 15] +
                  " is not supported (modhooks reads what torch.save writes of weights-only "
                  "objects)");
      }
    }
  }
  op_offset_ = pos_;
  error("checkpoint.pickle.truncated", "truncated: the pickle ends without STOP");
}

}  // namespace

StateDict unpickle_state_dict(std::string_view pickle, const StorageLoader& load_storage,
                              std::uint64_t budget, const std::string& budget_rule,
                              PickleEnd* end) {
  Unpickler unpickler(pickle, load_storage, budget, budget_rule);
  StateDict out = unpickler.state_dict();
  if (end != nullptr) *end = unpickler.end();
  return out;
}

c10::IValue unpickle_object(std::string_view pickle, const StorageLoader& load_storage,
                            std::uint64_t budget, const std::string& budget_rule, PickleEnd* end) {
  Unpickler unpickler(pickle, load_storage, budget, budget_rule);
  c10::IValue out = unpickler.object();
  if (end != nullptr) *end = unpickler.end();
  return out;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
