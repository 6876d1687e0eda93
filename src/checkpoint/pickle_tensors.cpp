// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// What the pickle machine makes of storages and tensors: BINPERSID's persistent ids, which load
// a storage once per record, and the torch._utils rebuild functions, which check a view against
// its storage before ATen sees it.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "modhooks/version.h"
#include "pickle_objects.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {
namespace {

/// What libtorch allocates for one tensor beside its TensorImpl, in bytes (its version counter);
/// an upper bound, which tests/load_memory_test.cpp checks against a flood of tensors.
constexpr std::uint64_t kTensorExtraBytes = 64;

}  // namespace

Value PickleObjects::persistent_load(const Value& pid) {
  // The legacy format adds view_metadata, None since storages have no views.
  if (pid.tag != Tag::kTuple || (pid.items->items.size() != 5 && pid.items->items.size() != 6)) {
    error("checkpoint.pickle.bad_storage",
          "persistent id is not a ('storage', type, key, location, numel) tuple");
  }
  const auto& f = pid.items->items;
  if (f.size() == 6 && f[5].tag != Tag::kNone) {
    error("checkpoint.pickle.storage_view",
          "persistent id names a view of a storage (view_metadata), which is not supported");
  }
  if (f[0].tag != Tag::kStr || f[0].str() != "storage") {
    error("checkpoint.pickle.bad_storage", "persistent id does not start with 'storage'");
  }
  if (f[1].tag != Tag::kGlobal ||
      (f[1].global != Global::kStorageClass && f[1].global != Global::kUntypedStorage)) {
    error("checkpoint.pickle.bad_storage", "persistent id names no storage type");
  }
  if (f[2].tag != Tag::kStr)
    error("checkpoint.pickle.bad_storage", "storage key is a " + std::string(tag_name(f[2].tag)));
  if (f[3].tag != Tag::kStr) {
    error("checkpoint.pickle.bad_storage",
          "storage location is a " + std::string(tag_name(f[3].tag)));
  }
  const std::int64_t numel = expect_int(f[4], "storage size");
  if (numel < 0) error("checkpoint.pickle.bad_storage", "storage size is negative");
  const std::string& key = f[2].str();
  // Zip readers stop a record's name at a NUL byte and miniz compares names ignoring ASCII case,
  // so "0\0x" or "A" and "a" would load one record twice, as two storages.
  if (key.find('\0') != std::string::npos)
    error("checkpoint.pickle.bad_storage", "storage key contains a NUL byte");
  // The folded copy is made once per BINPERSID; its heap block (beyond 15 characters) counts.
  budget_.charge(key.size() > 15 ? key.size() + 1 : 0);
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
  budget_.charge(nbytes);
  budget_.charge(sizeof(c10::StorageImpl) + sizeof(decltype(storages_)::value_type) +
                 kHashEntryBytes + 2 * (key.size() + 1));
  c10::Storage storage = load_storage_(key, dtype, static_cast<std::uint64_t>(numel));
  storages_.emplace(std::move(record), Loaded{key, storage, dtype});
  Value v = Value::of_storage(std::move(storage));
  v.global = storage_class;
  v.dtype = dtype;
  return v;
}

Value PickleObjects::rebuild_tensor(const std::vector<Value>& args, bool v3) {
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
  if (storage_arg.tag != Tag::kStorage) {
    error("checkpoint.pickle.bad_tensor",
          std::string(fn) + " expects a storage, got a " + tag_name(storage_arg.tag));
  }
  const c10::Storage storage = storage_arg.storage();
  c10::ScalarType dtype = storage_arg.dtype;
  if (v3) {
    if (storage_arg.global != Global::kUntypedStorage) {
      error("checkpoint.pickle.bad_tensor", "_rebuild_tensor_v3 expects an UntypedStorage");
    }
    if (args[6].tag != Tag::kGlobal || args[6].global != Global::kDtype) {
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
  PickleBudget::ScopedRefund refund(budget_);
  const std::vector<std::int64_t> sizes = expect_int_tuple(args[2], "tensor size");
  const std::vector<std::int64_t> strides = expect_int_tuple(args[3], "tensor stride");
  refund.bytes = (sizes.capacity() + strides.capacity()) * sizeof(std::int64_t);
  if (sizes.size() != strides.size()) {
    error("checkpoint.pickle.bad_tensor", "tensor has " + std::to_string(sizes.size()) +
                                              " sizes but " + std::to_string(strides.size()) +
                                              " strides");
  }
  check_tensor_flags(args, base);
  check_view_fits(sizes, strides, offset, c10::elementSize(dtype), storage.nbytes());
  const bool requires_grad = args[4].number != 0;
  check_grad_dtype(dtype, "tensor", requires_grad);
  charge_tensor(sizes.size(), requires_grad);
  budget_.charge(sizeof(c10::StorageImpl));  // at::empty's, which set_ replaces and frees
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype));
  t.set_(storage, offset, sizes, strides);
  budget_.refund(sizeof(c10::StorageImpl));
  if (requires_grad) t.set_requires_grad(true);
  return Value::of_tensor(std::move(t));
}

void PickleObjects::check_tensor_flags(const std::vector<Value>& args, std::size_t base) {
  if (args[4].tag != Tag::kBool)
    error("checkpoint.pickle.bad_tensor", "requires_grad is not a bool");
  expect_no_hooks(args[5]);
  if (args.size() == base + 1) {
    const Value& meta = args[base];
    if (meta.tag != Tag::kDict)
      error("checkpoint.pickle.bad_tensor", "tensor metadata is not a dict");
    for (std::size_t i = 1; i < meta.items->items.size(); i += 2) {
      const Value& flag = meta.items->items[i];
      if (flag.tag != Tag::kBool || flag.number != 0) {
        error("checkpoint.pickle.bad_tensor",
              "tensor metadata '" + key_text(meta.items->items[i - 1]) +
                  "' (a conjugate or negative view) is not supported");
      }
    }
  }
}

void PickleObjects::check_view_fits(const std::vector<std::int64_t>& sizes,
                                    const std::vector<std::int64_t>& strides, std::int64_t offset,
                                    std::uint64_t itemsize, std::uint64_t nbytes) {
  // The last element the view reaches must lie in the storage; checked here, with overflow
  // checks, before ATen sees the numbers.
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
        needed > nbytes) {
      error("checkpoint.pickle.bad_tensor",
            "tensor of size " + c10::str(c10::IntArrayRef(sizes)) + ", stride " +
                c10::str(c10::IntArrayRef(strides)) + " at offset " + std::to_string(offset) +
                " reaches beyond its storage of " + std::to_string(nbytes) + " bytes");
    }
  }
}

Value PickleObjects::rebuild_parameter(const std::vector<Value>& args) {
  // (data, requires_grad, backward_hooks): a Parameter is a tensor that may require grad.
  if (args.size() != 3) {
    error("checkpoint.pickle.bad_tensor",
          "_rebuild_parameter takes 3 arguments, got " + std::to_string(args.size()));
  }
  if (args[0].tag != Tag::kTensor) {
    error("checkpoint.pickle.bad_tensor",
          "_rebuild_parameter expects a tensor, got a " + std::string(tag_name(args[0].tag)));
  }
  if (args[1].tag != Tag::kBool)
    error("checkpoint.pickle.bad_tensor", "requires_grad is not a bool");
  expect_no_hooks(args[2]);
  // A new tensor on the same storage, as Python's Parameter(data) is: the data may be memoized
  // and stand under another key too, whose requires_grad must not change.
  const at::Tensor data = args[0].tensor();
  const bool requires_grad = args[1].number != 0;
  check_grad_dtype(data.scalar_type(), "parameter", requires_grad);
  charge_tensor(static_cast<std::uint64_t>(data.dim()), requires_grad);
  at::Tensor t = data.detach();
  t.set_requires_grad(requires_grad);
  return Value::of_tensor(std::move(t));
}

void PickleObjects::check_grad_dtype(c10::ScalarType dtype, const char* what, bool requires_grad) {
  if (requires_grad && !c10::isFloatingType(dtype) && !c10::isComplexType(dtype)) {
    error("checkpoint.pickle.bad_tensor",
          "a " + std::string(c10::toString(dtype)) + " " + what + " cannot require grad");
  }
}

void PickleObjects::charge_tensor(std::uint64_t dim, bool requires_grad) {
  std::uint64_t bytes = sizeof(c10::TensorImpl) + kTensorExtraBytes;
  if (dim > 5) bytes += 2 * sizeof(std::int64_t) * dim;
  if (requires_grad) bytes += sizeof(torch::autograd::AutogradMeta);
  budget_.charge(bytes);
}

void PickleObjects::expect_no_hooks(const Value& v) {
  if (v.tag != Tag::kDict || !v.items->items.empty()) {
    error("checkpoint.pickle.bad_object",
          "backward hooks must be an empty OrderedDict, not a " + std::string(tag_name(v.tag)));
  }
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
