// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The pickle machine: reads the opcodes of data.pkl and keeps the stack, the marks and the memo;
// what the opcodes make is pickle_objects.cpp's, the conversions of the result are
// pickle_state_dict.cpp's and pickle_ivalue.cpp's, and all of them charge one PickleBudget.
#include "unpickler.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "modhooks/version.h"
#include "pickle_budget.h"
#include "pickle_convert.h"
#include "pickle_objects.h"
#include "pickle_value.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {
namespace {

/// The machine for one pickle, used once: the dispatch over its opcodes (run) and the stack,
/// marks and memo they work on. It owns the budget, which everything the load allocates is
/// charged to, and the opcode offset that every error names.
class Unpickler {
 public:
  Unpickler(std::string_view data, const StorageLoader& load_storage, std::uint64_t budget,
            const std::string& budget_rule)
      : data_(data),
        budget_(budget, budget_rule, op_offset_),
        objects_(budget_, op_offset_, load_storage) {}

  /// The state dict the pickle describes.
  StateDict state_dict() { return state_dict_of(run(), budget_); }
  /// The object the pickle describes, as an IValue.
  c10::IValue object() {
    Value result = run();
    return ivalue_of(result, budget_);
  }
  /// After state_dict() or object(): where the pickle's STOP ended and the budget left.
  PickleEnd end() const { return PickleEnd{pos_, budget_.left()}; }

 private:
  /// Runs the pickle to its STOP and returns its object; the stack and memo are freed by then,
  /// so a container's reference count says how often the object refers to it.
  Value run();

  [[noreturn]] void error(const char* id, const std::string& message) const {
    pickle_error(op_offset_, id, message);
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
    budget_.make_room(stack_, 1);
    stack_.push_back(std::move(v));
  }
  void memoize(std::uint64_t index);

  /// The items pushed since the last MARK, which is dropped.
  std::vector<Value> pop_to_mark() {
    if (marks_.empty()) error("checkpoint.pickle.malformed", "no MARK to pop to");
    std::size_t mark = marks_.back();
    marks_.pop_back();
    budget_.charge_items<Value>(stack_.size() - mark);
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + mark),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
  std::size_t op_offset_ = 0;
  /// Declared after op_offset_, which it names in its error, and before objects_, which charges
  /// it.
  PickleBudget budget_;
  PickleObjects objects_;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  /// Indexed by memo index: pickles number their memo 0, 1, 2, ... An index far beyond that
  /// makes a vector the budget refuses.
  std::vector<Value> memo_;
  std::uint64_t memo_count_ = 0;  // slots set: Python's len(memo), which MEMOIZE uses
};

void Unpickler::memoize(std::uint64_t index) {
  const Value& value = top();
  if (index >= memo_.size()) {
    // Grown as a vector grows, by doubling, so that numbering 0, 1, 2, ... costs 16 bytes a
    // slot amortized; the new slots are unset.
    budget_.make_room(memo_, index + 1 - memo_.size());
    memo_.resize(static_cast<std::size_t>(index) + 1, Value::unset());
  }
  if (memo_[index].tag == Tag::kUnset) ++memo_count_;
  memo_[index] = value;
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
        budget_.free_vector(stack_);
        budget_.free_vector(memo_);
        budget_.free_vector(marks_);
        return result;
      }
      case '(':  // MARK
        budget_.make_room(marks_, 1);
        marks_.push_back(stack_.size());
        break;
      case 'N':  // NONE
        push(Value());
        break;
      case 0x88:  // NEWTRUE
        push(Value::of_bool(true));
        break;
      case 0x89:  // NEWFALSE
        push(Value::of_bool(false));
        break;
      case 'G': {  // BINFLOAT: big-endian IEEE 754 double
        std::uint64_t bits = 0;
        for (const char c : take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
        double d = 0;
        std::memcpy(&d, &bits, sizeof d);
        push(Value::of_float(d));
        break;
      }
      case 'J':  // BININT: signed 32-bit
        push(Value::of_int(static_cast<std::int32_t>(read_uint(4))));
        break;
      case 'K':  // BININT1
        push(Value::of_int(static_cast<std::int64_t>(read_uint(1))));
        break;
      case 'M':  // BININT2
        push(Value::of_int(static_cast<std::int64_t>(read_uint(2))));
        break;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const auto n = static_cast<int>(read_uint(1));
        if (n > 8)
          error("checkpoint.pickle.bad_object",
                "integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
        std::uint64_t bits = n == 0 ? 0 : read_uint(n);
        if (n > 0 && n < 8 && (bits >> (8 * n - 1)) != 0) bits |= ~std::uint64_t{0} << (8 * n);
        push(Value::of_int(static_cast<std::int64_t>(bits)));
        break;
      }
      case 'X':  // BINUNICODE
        push(objects_.make_str(take(read_uint(4))));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push(objects_.make_str(take(read_uint(1))));
        break;
      case 0x8d:  // BINUNICODE8
        push(objects_.make_str(take(read_uint(8))));
        break;
      case ')':  // EMPTY_TUPLE
        push(objects_.make_tuple({}));
        break;
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        budget_.charge_items<Value>(op - 0x84);
        std::vector<Value> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        push(objects_.make_tuple(std::move(items)));
        break;
      }
      case 't':  // TUPLE
        push(objects_.make_tuple(pop_to_mark()));
        break;
      case '}':  // EMPTY_DICT
        push(objects_.make_dict());
        break;
      case ']':  // EMPTY_LIST
        push(objects_.make_container(Tag::kList));
        break;
      case 'l':  // LIST
        push(objects_.make_list(pop_to_mark()));
        break;
      case 'a': {  // APPEND
        Value value = pop();
        objects_.append(top(), std::move(value));
        break;
      }
      case 'e': {  // APPENDS
        std::vector<Value> items = pop_to_mark();
        Value& list = top();
        for (Value& item : items) objects_.append(list, std::move(item));
        // The temporary list, freed; its items live on in the list.
        budget_.free_vector(items);
        break;
      }
      case 's': {  // SETITEM
        Value value = pop();
        Value key = pop();
        objects_.set_item(top(), std::move(key), std::move(value));
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<Value> items = pop_to_mark();
        if (items.size() % 2 != 0)
          error("checkpoint.pickle.malformed", "SETITEMS with an odd number of items");
        Value& dict = top();
        for (std::size_t i = 0; i < items.size(); i += 2) {
          objects_.set_item(dict, std::move(items[i]), std::move(items[i + 1]));
        }
        // The temporary list, freed; its items live on in the dict.
        budget_.free_vector(items);
        break;
      }
      case 'c': {  // GLOBAL
        std::string_view module = read_line();
        std::string_view name = read_line();
        push(objects_.resolve_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Value name = pop();
        Value module = pop();
        if (module.tag != Tag::kStr || name.tag != Tag::kStr) {
          error("checkpoint.pickle.malformed", "STACK_GLOBAL needs two strings");
        }
        push(objects_.resolve_global(module.str(), name.str()));
        break;
      }
      case 'R': {  // REDUCE
        Value args = pop();
        Value callable = pop();
        push(objects_.reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD
        Value state = pop();
        objects_.build(top(), state);
        break;
      }
      case 'Q': {  // BINPERSID
        Value pid = pop();
        push(objects_.persistent_load(pid));
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
        if (index >= memo_.size() || memo_[index].tag == Tag::kUnset) {
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
}  // namespace pickle

StateDict unpickle_state_dict(std::string_view pickle, const StorageLoader& load_storage,
                              std::uint64_t budget, const std::string& budget_rule,
                              PickleEnd* end) {
  pickle::Unpickler unpickler(pickle, load_storage, budget, budget_rule);
  StateDict out = unpickler.state_dict();
  if (end != nullptr) *end = unpickler.end();
  return out;
}

c10::IValue unpickle_object(std::string_view pickle, const StorageLoader& load_storage,
                            std::uint64_t budget, const std::string& budget_rule, PickleEnd* end) {
  pickle::Unpickler unpickler(pickle, load_storage, budget, budget_rule);
  c10::IValue out = unpickler.object();
  if (end != nullptr) *end = unpickler.end();
  return out;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
