// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modhooks/version.h"
#include "pickle_budget.h"
#include "pickle_value.h"
#include "unpickler.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {

/// What the opcodes of the machine (unpickler.cpp) make, and the checks on it: strings,
/// containers (the nesting bound, no cycles), the allowed globals and what calling them builds
/// (pickle_objects.cpp), storages and tensors (pickle_tensors.cpp). The machine keeps the stack
/// and memo and hands the values here; every object made is charged to the machine's budget.
class PickleObjects {
 public:
  /// `op_offset` is the machine's offset of the opcode it runs, for error texts.
  PickleObjects(PickleBudget& budget, const std::size_t& op_offset,
                const StorageLoader& load_storage)
      : budget_(budget), op_offset_(op_offset), load_storage_(load_storage) {}

  [[noreturn]] void error(const char* id, const std::string& message) const {
    pickle_error(op_offset_, id, message);
  }

  // --- values
  Value make_str(std::string_view bytes);
  Value make_tuple(std::vector<Value> items);
  /// LIST: a list of the items above the MARK.
  Value make_list(std::vector<Value> items);
  Value make_container(Tag tag);
  Value make_dict() { return make_container(Tag::kDict); }
  void set_item(Value& dict, Value key, Value value);
  void append(Value& list, Value value);

  // --- opcodes with meaning
  Value resolve_global(std::string_view module, std::string_view name);
  Value reduce(const Value& callable, const Value& args);
  Value persistent_load(const Value& pid);
  void build(Value& target, const Value& state);

 private:
  /// A tuple or list of `items`, nested in it.
  Value make_sequence(Tag tag, std::vector<Value> items);
  /// Puts `child` inside `parent`: seals the child and keeps the depth bound.
  void nest(Container& parent, const Value& child);

  Value rebuild_tensor(const std::vector<Value>& args, bool v3);
  /// The checks of _rebuild_tensor_v2/v3's requires_grad, hooks and metadata arguments.
  void check_tensor_flags(const std::vector<Value>& args, std::size_t base);
  /// Fails unless the view `sizes`, `strides` at `offset` of `itemsize` bytes lies in `nbytes`.
  void check_view_fits(const std::vector<std::int64_t>& sizes,
                       const std::vector<std::int64_t>& strides, std::int64_t offset,
                       std::uint64_t itemsize, std::uint64_t nbytes);
  Value rebuild_parameter(const std::vector<Value>& args);
  /// Fails when a tensor (`what`: "tensor" or "parameter") of `dtype` requires grad, which only
  /// floating and complex tensors can.
  void check_grad_dtype(c10::ScalarType dtype, const char* what, bool requires_grad);
  Value make_device(const std::vector<Value>& args);
  Value make_complex(const std::vector<Value>& args);

  /// A tensor: its TensorImpl and what libtorch allocates beside it, sizes and strides beyond the
  /// five dimensions a TensorImpl keeps inline, autograd's metadata when it requires grad.
  void charge_tensor(std::uint64_t dim, bool requires_grad);

  // --- argument checks
  std::int64_t expect_int(const Value& v, const char* what);
  std::vector<std::int64_t> expect_int_tuple(const Value& v, const char* what);
  void expect_no_hooks(const Value& v);

  PickleBudget& budget_;
  const std::size_t& op_offset_;
  const StorageLoader& load_storage_;
  struct Loaded {
    std::string key;
    c10::Storage storage;
    c10::ScalarType dtype;
  };
  std::unordered_map<std::string, Loaded> storages_;  // by record name: the key, case-folded
};

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
