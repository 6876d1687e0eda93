// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// What the pickle machine's opcodes make, apart from storages and tensors (pickle_tensors.cpp):
// strings, containers, the globals a pickle may name and what calling them builds.
#include <c10/core/Device.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "dtypes.h"
#include "modhooks/version.h"
#include "pickle_objects.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {
namespace {

/// A global a pickle may name by its module and name alone; storage classes and dtypes are
/// looked up in dtypes.h's table.
struct NamedGlobal {
  std::string_view module;
  std::string_view name;
  Global global;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

constexpr NamedGlobal kNamedGlobals[] = {
    {"collections", "OrderedDict", Global::kOrderedDict},
    {"collections", "Counter", Global::kCounter},
    // Python 3 writes builtins under their Python 2 module name in protocol 2.
    {"builtins", "complex", Global::kComplex},
    {"__builtin__", "complex", Global::kComplex},
    {"torch", "Size", Global::kSize},
    {"torch", "device", Global::kDevice},
    {"torch._utils", "_rebuild_tensor_v2", Global::kRebuildTensorV2},
    {"torch._utils", "_rebuild_tensor_v3", Global::kRebuildTensorV3},
    {"torch._utils", "_rebuild_parameter", Global::kRebuildParameter},
    {"torch", "UntypedStorage", Global::kUntypedStorage, c10::ScalarType::Byte},
    {"torch.storage", "UntypedStorage", Global::kUntypedStorage, c10::ScalarType::Byte},
};

}  // namespace

Value PickleObjects::make_str(std::string_view bytes) {
  // Python's unpickler decodes with "surrogatepass", so encoded surrogates are accepted too.
  if (!is_utf8(bytes, /*surrogates=*/true))
    error("checkpoint.pickle.bad_string", "string is not valid UTF-8");
  // libstdc++ keeps up to 15 characters inside the string.
  budget_.charge(sizeof(Str) + (bytes.size() > 15 ? bytes.size() + 1 : 0));
  Value v;
  v.text = new Str{1, std::string(bytes)};
  v.tag = Tag::kStr;
  return v;
}

Value PickleObjects::make_tuple(std::vector<Value> items) {
  Value v = make_sequence(Tag::kTuple, std::move(items));
  v.items->sealed = true;
  return v;
}

Value PickleObjects::make_list(std::vector<Value> items) {
  return make_sequence(Tag::kList, std::move(items));
}

Value PickleObjects::make_sequence(Tag tag, std::vector<Value> items) {
  Value v = make_container(tag);
  for (const Value& item : items) nest(*v.items, item);
  v.items->items = std::move(items);
  return v;
}

Value PickleObjects::make_container(Tag tag) {
  budget_.charge(sizeof(Container));
  Value v;
  v.items = new Container();
  v.tag = tag;
  return v;
}

void PickleObjects::nest(Container& parent, const Value& child) {
  if (!child.is_container()) return;
  if (child.items == &parent) error("checkpoint.pickle.cycle", "a container cannot contain itself");
  child.items->sealed = true;
  parent.depth = std::max(parent.depth, child.items->depth + 1);
  if (parent.depth > kMaxPickleDepth) {
    error("checkpoint.pickle.too_deep",
          "objects nest deeper than " + std::to_string(kMaxPickleDepth) + " levels");
  }
}

void PickleObjects::set_item(Value& dict, Value key, Value value) {
  if (dict.tag != Tag::kDict)
    error("checkpoint.pickle.malformed", "SETITEM on a " + std::string(tag_name(dict.tag)));
  if (dict.items->sealed)
    error("checkpoint.pickle.malformed",
          "SETITEM on a dict that is already nested in another object");
  // The key types IValue dicts can hash; a state dict's keys must be str (to_state_dict).
  if (key.tag != Tag::kStr && key.tag != Tag::kInt && key.tag != Tag::kBool &&
      key.tag != Tag::kFloat) {
    error("checkpoint.pickle.bad_object",
          "dict key is a " + std::string(tag_name(key.tag)) + ", not a str, int, float or bool");
  }
  nest(*dict.items, value);
  budget_.make_room(dict.items->items, 2);
  dict.items->items.push_back(std::move(key));
  dict.items->items.push_back(std::move(value));
}

void PickleObjects::append(Value& list, Value value) {
  if (list.tag != Tag::kList)
    error("checkpoint.pickle.malformed", "APPEND to a " + std::string(tag_name(list.tag)));
  if (list.items->sealed)
    error("checkpoint.pickle.malformed",
          "APPEND to a list that is already nested in another object");
  nest(*list.items, value);
  budget_.make_room(list.items->items, 1);
  list.items->items.push_back(std::move(value));
}

std::int64_t PickleObjects::expect_int(const Value& v, const char* what) {
  if (v.tag != Tag::kInt)
    error("checkpoint.pickle.bad_object",
          std::string(what) + " is a " + tag_name(v.tag) + ", not an int");
  return v.number;
}

std::vector<std::int64_t> PickleObjects::expect_int_tuple(const Value& v, const char* what) {
  if (v.tag != Tag::kTuple) {
    error("checkpoint.pickle.bad_object",
          std::string(what) + " is a " + tag_name(v.tag) + ", not a tuple");
  }
  std::vector<std::int64_t> out;
  budget_.charge_items<std::int64_t>(v.items->items.size());
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

Value PickleObjects::resolve_global(std::string_view module, std::string_view name) {
  Value v;
  v.tag = Tag::kGlobal;
  for (const NamedGlobal& known : kNamedGlobals) {
    if (module == known.module && name == known.name) {
      v.global = known.global;
      v.dtype = known.dtype;
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

Value PickleObjects::make_device(const std::vector<Value>& args) {
  // torch.device.__reduce__ gives (device, (type,)) or (device, (type, index)).
  if (args.empty() || args.size() > 2 || args[0].tag != Tag::kStr) {
    error("checkpoint.pickle.bad_object", "torch.device takes a type name and an optional index");
  }
  std::string spec = args[0].str();
  if (args.size() == 2) {
    // Appended in two steps: GCC 12 reports a false -Warray-bounds on ":" + std::string here.
    const std::int64_t index = expect_int(args[1], "device index");
    spec += ':';
    spec += std::to_string(index);
  }
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(spec);
  } catch (const c10::Error&) {
    error("checkpoint.pickle.unknown_device",
          "'" + spec + "' is not a device this libtorch (" + TORCH_VERSION + ") knows");
  }
  Value v;
  v.tag = Tag::kDevice;
  v.number = (static_cast<std::int64_t>(device.type()) << 16) |
             static_cast<std::uint16_t>(static_cast<std::int16_t>(device.index()));
  return v;
}

Value PickleObjects::make_complex(const std::vector<Value>& args) {
  if (args.size() != 2)
    error("checkpoint.pickle.bad_object", "complex takes a real and an imaginary part");
  std::vector<Value> parts;
  budget_.charge_items<Value>(2);
  parts.reserve(2);
  for (const Value& part : args) {
    if (part.tag == Tag::kFloat) {
      parts.push_back(part);
    } else if (part.tag == Tag::kInt) {
      parts.push_back(Value::of_float(static_cast<double>(part.number)));
    } else {
      error("checkpoint.pickle.bad_object",
            "a part of a complex number is a " + std::string(tag_name(part.tag)));
    }
  }
  Value v = make_container(Tag::kComplex);
  v.items->items = std::move(parts);
  v.items->sealed = true;
  return v;
}

Value PickleObjects::reduce(const Value& callable, const Value& args) {
  if (callable.tag != Tag::kGlobal) {
    error("checkpoint.pickle.bad_object", "REDUCE calls a " + std::string(tag_name(callable.tag)));
  }
  if (args.tag != Tag::kTuple)
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
      if (a.size() != 1 || a[0].tag != Tag::kDict)
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

void PickleObjects::build(Value& target, const Value& state) {
  // Python sets `_metadata` on the OrderedDict by BUILD with the state {'_metadata': ...}.
  if (target.tag != Tag::kDict || target.items->sealed) {
    error("checkpoint.pickle.bad_object", "BUILD on a " + std::string(tag_name(target.tag)) +
                                              "; only an OrderedDict's _metadata can be set");
  }
  if (state.tag != Tag::kDict)
    error("checkpoint.pickle.bad_object", "BUILD state is a " + std::string(tag_name(state.tag)));
  const auto& items = state.items->items;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    if (items[i].tag != Tag::kStr || items[i].str() != "_metadata") {
      error("checkpoint.pickle.bad_object",
            "BUILD sets the attribute '" + key_text(items[i]) + "'; only _metadata is allowed");
    }
    if (items[i + 1].tag != Tag::kDict)
      error("checkpoint.pickle.bad_object", "_metadata is not a dict");
    nest(*target.items, items[i + 1]);
    target.items->metadata = items[i + 1];
  }
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
