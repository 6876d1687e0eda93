// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byte_io.h"
#include "dtypes.h"
#include "entries.h"
#include "file_io.h"
#include "formats.h"
#include "modhooks/core/error.h"
#include "modhooks/version.h"
#include "unpickler.h"
#include "zip_check.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// What a load may hold once the zip directory is checked: kBytesPerFileByte times the file's
/// size plus kAllowance, for the pickle, the tensor data, the unpickler's objects, the index of
/// records and the state dict returned. A tensor's objects (TensorImpl, memoized argument
/// tuples, its entry) take 1 to 1.6 KiB with libtorch 2.15, while it takes 75 bytes of a file (a
/// view of a storage already written) to 300 (a one-element tensor with its record): Python's files
/// of 2,000 views of one tensor hold 14.5 times their size, of 700 tiny parameters and buffers
/// over 300 modules 6.5 times (tests/load_memory_test.cpp).
constexpr std::uint64_t kBytesPerFileByte = 16;
constexpr std::uint64_t kAllowance = std::uint64_t{1} << 20;
/// Of the allowance, what the load holds outside the budget's count: the readers, the archive,
/// the error's text.
constexpr std::uint64_t kUncounted = std::uint64_t{64} << 10;

/// Reverses each element's bytes: files written on big-endian hosts say so in "byteorder".
/// Complex numbers swap their two halves separately, as torch.load does.
void swap_bytes(void* data, std::uint64_t nbytes, c10::ScalarType dtype) {
  std::size_t width = c10::elementSize(dtype);
  if (c10::isComplexType(dtype)) width /= 2;
  if (width <= 1) return;
  auto* bytes = static_cast<char*>(data);
  for (std::uint64_t i = 0; i + width <= nbytes; i += width) {
    std::reverse(bytes + i, bytes + i + width);
  }
}

/// Protocol 2 pickle of a state dict, in the layout torch.save gives it, so that Python's
/// `torch.load(weights_only=True)` reads it back as the same OrderedDict.
class PickleWriter {
 public:
  std::string take() { return std::move(out_); }

  void proto() { op(0x80), byte(2); }
  void stop() { op('.'); }
  void mark() { op('('); }
  void tuple() { op('t'); }
  void empty_tuple() { op(')'); }
  void tuple2() { op(0x86); }
  void empty_dict() { op('}'); }
  void reduce() { op('R'); }
  void set_item() { op('s'); }
  void build() { op('b'); }
  void persistent_id() { op('Q'); }
  void boolean(bool b) { op(b ? 0x88 : 0x89); }
  void none() { op('N'); }
  void empty_list() { op(']'); }
  void appends() { op('e'); }
  void set_items() { op('u'); }
  /// BINFLOAT: the double's bits, big-endian.
  void floating(double d) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    op('G');
    for (int i = 7; i >= 0; --i) byte(static_cast<unsigned char>(bits >> (8 * i)));
  }
  /// LONG_BINPUT / LONG_BINGET: memo slot `index`.
  void put(std::uint32_t index) { op('r'), le(index, 4); }
  void get(std::uint32_t index) { op('j'), le(index, 4); }
  void global(const std::string& module, std::string_view name) {
    op('c');
    out_ += module;
    out_ += '\n';
    out_.append(name.data(), name.size());
    out_ += '\n';
  }
  void str(const std::string& s) {
    if (s.size() > 0xFFFFFFFFu) {
      fail<ValueError>("checkpoint.save.string_too_long",
                       "string of " + std::to_string(s.size()) + " bytes is too long");
    }
    op('X');
    le(s.size(), 4);
    out_ += s;
  }
  void integer(std::int64_t n) {
    if (n >= 0 && n < 0x100) {
      op('K'), le(static_cast<std::uint64_t>(n), 1);
    } else if (n >= 0 && n < 0x10000) {
      op('M'), le(static_cast<std::uint64_t>(n), 2);
    } else if (n >= INT32_MIN && n <= INT32_MAX) {
      op('J'), le(static_cast<std::uint32_t>(static_cast<std::int32_t>(n)), 4);
    } else {
      op(0x8a), byte(8), le(static_cast<std::uint64_t>(n), 8);
    }
  }
  void int_tuple(c10::IntArrayRef values) {
    mark();
    for (std::int64_t v : values) integer(v);
    tuple();
  }
  void new_ordered_dict() {
    global("collections", "OrderedDict");
    empty_tuple();
    reduce();
  }

 private:
  void op(int code) { byte(static_cast<unsigned char>(code)); }
  void byte(unsigned char b) { out_ += static_cast<char>(b); }
  void le(std::uint64_t value, int n) {
    for (int i = 0; i < n; ++i) byte(static_cast<unsigned char>(value >> (8 * i)));
  }
  std::string out_;
};

/// Strides of a contiguous tensor of these sizes, as torch computes them.
std::vector<std::int64_t> row_major_strides(c10::IntArrayRef sizes) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<std::int64_t>(sizes[d], 1);
  }
  return strides;
}

/// The persistent id of storage `key` (record data/<key>), as Python writes it:
/// ('storage', <storage class>, key, 'cpu', size). Python names the untyped class by its defining
/// module, the typed ones through `torch`; `size` is in bytes for the untyped one, in elements
/// for the typed ones.
void pickle_storage_id(PickleWriter& w, const std::string& key, std::string_view storage_class,
                       std::int64_t size) {
  w.mark();
  w.str("storage");
  if (storage_class.empty()) {
    w.global("torch.storage", "UntypedStorage");
  } else {
    w.global("torch", storage_class);
  }
  w.str(key);
  w.str("cpu");
  w.integer(size);
  w.tuple();
  w.persistent_id();
}

/// The pickled tensor refers to storage `key`; its data is written as record data/<key>.
void pickle_tensor(PickleWriter& w, const std::string& key, const at::Tensor& t,
                   const DtypeNames& names) {
  const bool v3 = names.storage_class.empty();
  w.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  w.mark();
  pickle_storage_id(w, key, names.storage_class,
                    v3 ? static_cast<std::int64_t>(t.nbytes()) : t.numel());
  w.integer(0);
  w.int_tuple(t.sizes());
  w.int_tuple(row_major_strides(t.sizes()));
  w.boolean(t.requires_grad());
  w.new_ordered_dict();
  if (v3) w.global("torch", names.torch_name);
  w.tuple();
  w.reduce();
}

std::string pickle_state_dict(const StateDict& sd) {
  PickleWriter w;
  w.proto();
  w.new_ordered_dict();
  std::size_t i = 0;
  for (const auto& [key, tensor] : sd) {
    w.str(key);
    pickle_tensor(w, std::to_string(i++), tensor, checked_dtype(key, tensor));
    w.set_item();
  }
  if (!sd.metadata().empty()) {
    // Python's pickle of an OrderedDict's instance dict: BUILD with {'_metadata': ...}.
    w.empty_dict();
    w.str("_metadata");
    w.new_ordered_dict();
    for (const auto& [prefix, metadata] : sd.metadata()) {
      check_utf8("_metadata prefix '" + prefix + "'", prefix);
      w.str(prefix);
      w.empty_dict();
      // Keys are sorted, so the flattened keys of one nested dict are adjacent.
      for (auto it = metadata.begin(); it != metadata.end();) {
        const std::string& name = it->first;
        check_utf8("_metadata['" + prefix + "'] key '" + name + "'", name);
        const std::size_t cut = name.find(kNestedMetadataSeparator);
        if (cut == std::string::npos) {
          w.str(name);
          w.integer(it->second);
          w.set_item();
          ++it;
          continue;
        }
        const std::string outer = name.substr(0, cut + 1);
        w.str(name.substr(0, cut));
        w.empty_dict();
        for (; it != metadata.end() && it->first.compare(0, outer.size(), outer) == 0; ++it) {
          w.str(it->first.substr(outer.size()));
          w.integer(it->second);
          w.set_item();
        }
        w.set_item();
      }
      w.set_item();
    }
    w.set_item();
    w.build();
  }
  w.stop();
  return w.take();
}

/// Pickles an IValue as torch.save pickles the Python object it stands for, so that Python's
/// `torch.load(weights_only=True)` reads it back: GenericDicts as dicts, lists, tuples, None,
/// bools, ints, floats, complex numbers, strings, devices and tensors. Each tensor object is
/// written once, as a contiguous record (like `save`); a tensor or container met again is a
/// memo reference, so sharing survives. Cycles, unsupported tags and nesting deeper than the
/// reader accepts fail, naming the place in the object, before anything is written.
class ObjectPickler {
 public:
  std::string pickle(const c10::IValue& object) {
    w_.proto();
    value(object, "object", 0);
    w_.stop();
    return w_.take();
  }
  /// The tensors whose records follow, in the order of their storage keys.
  const std::vector<at::Tensor>& tensors() const { return tensors_; }

 private:
  /// What load_object accepts: the unpickler's nesting bound.
  static constexpr int kMaxDepth = 32;

  void value(const c10::IValue& v, const std::string& where, int depth) {
    if (v.isNone()) {
      w_.none();
    } else if (v.isBool()) {
      w_.boolean(v.toBool());
    } else if (v.isInt()) {
      w_.integer(v.toInt());
    } else if (v.isDouble()) {
      w_.floating(v.toDouble());
    } else if (v.isComplexDouble()) {
      const c10::complex<double> c = v.toComplexDouble();
      w_.global("__builtin__", "complex");
      w_.floating(c.real());
      w_.floating(c.imag());
      w_.tuple2();
      w_.reduce();
    } else if (v.isString()) {
      const std::string& text = v.toStringRef();
      check_utf8(where, text);
      w_.str(text);
    } else if (v.isDevice()) {
      const c10::Device device = v.toDevice();
      w_.global("torch", "device");
      w_.mark();
      w_.str(c10::DeviceTypeName(device.type(), /*lower_case=*/true));
      if (device.has_index()) w_.integer(device.index());
      w_.tuple();
      w_.reduce();
    } else if (v.isTensor()) {
      tensor(v.toTensor(), where);
    } else if (v.isStorage()) {
      storage(v.toStorage());
    } else if (v.isTuple() || v.isList() || v.isGenericDict()) {
      container(v, where, depth + 1);
    } else {
      fail<TypeError>("checkpoint.save.unsupported_value",
                      where + " is a " + v.tagKind() +
                          ", which torch.load(weights_only=True) cannot read back");
    }
  }

  void tensor(const at::Tensor& t, const std::string& where) {
    const void* identity = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
    if (auto found = memo_.find(identity); identity != nullptr && found != memo_.end()) {
      w_.get(found->second);
      return;
    }
    const DtypeNames& names = checked_dtype(where, t);
    pickle_tensor(w_, std::to_string(tensors_.size()), t, names);
    tensors_.push_back(t);
    remember(identity);
  }

  /// A storage on its own, as Python saves `tensor.untyped_storage()`: its persistent id alone,
  /// with the record of its bytes. An IValue's storage has no dtype, so Python reads it back as a
  /// TypedStorage of uint8 (load_object as the same bytes). Python writes the persistent id at
  /// each reference and shares by key; so does this.
  void storage(const c10::Storage& storage) {
    auto [found, added] = storage_keys_.try_emplace(storage.unsafeGetStorageImpl(), "");
    if (added) {
      found->second = std::to_string(tensors_.size());
      tensors_.push_back(
          at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()))
              .set_(storage));
    }
    pickle_storage_id(w_, found->second, /*storage_class=*/"",
                      static_cast<std::int64_t>(storage.nbytes()));
  }

  void container(const c10::IValue& v, const std::string& where, int depth) {
    if (depth > kMaxDepth) {
      fail<ValueError>("checkpoint.save.too_deep", where + " nests deeper than " +
                                                       std::to_string(kMaxDepth) +
                                                       " levels, which load_object refuses");
    }
    const void* identity = v.internalToPointer();
    if (auto found = memo_.find(identity); found != memo_.end()) {
      if (found->second == kInProgress)
        fail<ValueError>("checkpoint.save.cycle", where + " contains itself");
      w_.get(found->second);
      return;
    }
    memo_[identity] = kInProgress;
    if (v.isTuple()) {
      const auto& items = v.toTupleRef().elements();
      w_.mark();
      for (std::size_t i = 0; i < items.size(); ++i) {
        value(items[i], where + "[" + std::to_string(i) + "]", depth);
      }
      w_.tuple();
    } else if (v.isList()) {
      const c10::ArrayRef<c10::IValue> items = v.toListRef();
      w_.empty_list();
      w_.mark();
      for (std::size_t i = 0; i < items.size(); ++i) {
        value(items[i], where + "[" + std::to_string(i) + "]", depth);
      }
      w_.appends();
    } else {
      w_.empty_dict();
      w_.mark();
      for (const auto& entry : v.toGenericDict()) {
        const c10::IValue& key = entry.key();
        std::string key_text;
        if (key.isString()) {
          key_text = "'" + key.toStringRef() + "'";
        } else if (key.isInt()) {
          key_text = std::to_string(key.toInt());
        } else if (key.isBool() || key.isDouble()) {
          key_text = c10::str(key);
        } else {
          fail<TypeError>("checkpoint.save.unsupported_key",
                          where + " has a key of type " + key.tagKind() +
                              "; only str, int, float and bool " + "keys are read back");
        }
        value(key, where + " key " + key_text, depth);
        value(entry.value(), where + "[" + key_text + "]", depth);
      }
      w_.set_items();
    }
    remember(identity);
  }

  /// The memo slot of the object just written: Python's pickler memoizes every object the same
  /// way, so reading it back shares what was shared.
  void remember(const void* identity) {
    const auto index = static_cast<std::uint32_t>(next_memo_++);
    w_.put(index);
    if (identity != nullptr) memo_[identity] = index;
  }

  static constexpr std::uint32_t kInProgress = 0xFFFFFFFFu;
  PickleWriter w_;
  std::vector<at::Tensor> tensors_;
  std::unordered_map<const void*, std::uint32_t> memo_;
  std::unordered_map<const c10::StorageImpl*, std::string> storage_keys_;
  std::uint64_t next_memo_ = 0;
};

c10::Storage load_record(const ZipArchive& archive, const std::string& key, c10::ScalarType dtype,
                         std::uint64_t numel, bool big_endian,
                         const std::shared_ptr<const MappedFile>& mapped) {
  const std::string name = "data/" + key;
  const ZipRecord* record = archive.find(name);
  if (record == nullptr)
    fail<FormatError>("checkpoint.torch_save.missing_record",
                      "the archive has no record '" + name + "'");
  std::uint64_t nbytes = 0;
  if (mul_overflows(numel, c10::elementSize(dtype), &nbytes)) {
    fail<FormatError>("checkpoint.torch_save.storage_overflow",
                      "storage '" + key + "' of " + std::to_string(numel) + " elements overflows");
  }
  if (record->size != nbytes) {
    fail<FormatError>("checkpoint.torch_save.record_size_mismatch",
                      "record '" + name + "' holds " + std::to_string(record->size) +
                          " bytes, but its storage of " + std::to_string(numel) + " " +
                          c10::toString(dtype) + " elements needs " + std::to_string(nbytes));
  }
  if (mapped && !big_endian && record->data % c10::elementSize(dtype) == 0) {
    std::optional<std::uint32_t> crc;
    if (archive.checks_crc32()) crc = record->crc;
    return mapped_storage(
        MappedRecord{mapped, record->data, nbytes, "record '" + record->name + "'", crc});
  }
  // The zip layout check bounds the record by the file, so reading it allocates no more than
  // the file holds.
  at::DataPtr data = archive.read(*record);
  if (big_endian) swap_bytes(data.get(), nbytes, dtype);
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<std::int64_t>(nbytes),
                      std::move(data), c10::GetCPUAllocator(), /*resizable=*/false);
}

std::string read_string(const ZipArchive& archive, const ZipRecord& record) {
  const at::DataPtr data = archive.read(record);
  return std::string(static_cast<const char*>(data.get()), static_cast<std::size_t>(record.size));
}

/// The first two pickles of torch.save's legacy (pre-1.6, non-zip) format: its magic number
/// (0x1950a86a20f9469cfc6c) and protocol version 1001.
constexpr std::string_view kLegacyMagic("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.",
                                        15);
constexpr std::string_view kLegacyProtocol("\x80\x02M\xe9\x03.", 6);

bool is_legacy(const caffe2::serialize::ReadAdapterInterface& in) {
  if (in.size() < kLegacyMagic.size()) return false;
  char head[kLegacyMagic.size()];
  read_exactly(in, 0, head, sizeof head, "the file's first bytes");
  return std::string_view(head, sizeof head) == kLegacyMagic;
}

/// The budget rule of a torch.save load, for its error message.
std::string budget_rule(std::uint64_t file_size, std::uint64_t held, const char* what) {
  return std::to_string(kBytesPerFileByte) + " times its size of " + std::to_string(file_size) +
         " bytes, plus 1 MiB, less " + std::to_string(held) + " bytes for " + what;
}

/// What a load may hold beyond `held`: kBytesPerFileByte times the file's size plus
/// kAllowance.
std::uint64_t budget_for(std::uint64_t file_size, std::uint64_t held) {
  std::uint64_t limit = 0;
  if (mul_overflows(file_size, kBytesPerFileByte, &limit)) limit = ~std::uint64_t{0} >> 1;
  limit += kAllowance;
  return limit > held ? limit - held : 0;
}

/// What a legacy file's pickles may not name: a storage outside the object's own pickle.
c10::Storage no_legacy_storages(const std::string& key, c10::ScalarType, std::uint64_t) {
  fail<FormatError>("checkpoint.legacy.storage_outside_pickle",
                    "storage '" + key + "' is named outside the object's pickle");
}

/// Reads the legacy file's first pickle off `rest`, its sys_info dict ({"protocol_version": 1001,
/// "little_endian": bool, "type_sizes": {...}}, freed here): whether the storages' bytes are big
/// endian.
bool legacy_big_endian(std::string_view& rest, std::uint64_t budget, const std::string& rule,
                       PickleEnd& end) {
  const c10::IValue sys_info = unpickle_object(rest, no_legacy_storages, budget, rule, &end);
  if (!sys_info.isGenericDict())
    fail<FormatError>("checkpoint.legacy.bad_sys_info", "the legacy file's sys_info is not a dict");
  const c10::impl::GenericDict info = sys_info.toGenericDict();
  const auto little = info.find(c10::IValue(std::string("little_endian")));
  if (little == info.end() || !little->value().isBool()) {
    fail<FormatError>("checkpoint.legacy.bad_sys_info",
                      "the legacy file's sys_info has no little_endian flag");
  }
  rest.remove_prefix(end.consumed);
  return !little->value().toBool();
}

/// A storage the object's pickle named, which the file's bytes after the pickles fill.
struct LegacyStorage {
  void* data;
  std::uint64_t numel;
  c10::ScalarType dtype;
  bool filled;
};
using LegacyStorages = std::unordered_map<std::string, LegacyStorage>;

/// Fills `pending` from `rest`, the bytes after the pickles: for each of `keys` (the last
/// pickle, a list of str) an element count and the storage's bytes. Each storage the object
/// named is filled exactly once.
void fill_legacy_storages(std::string_view rest, const c10::IValue& keys, LegacyStorages& pending,
                          bool big_endian) {
  if (!keys.isList())
    fail<FormatError>("checkpoint.legacy.bad_storage_keys",
                      "the legacy file's list of storage keys is a " + keys.tagKind());
  for (const c10::IValue& key_value : keys.toListRef()) {
    if (!key_value.isString())
      fail<FormatError>("checkpoint.legacy.bad_storage_keys",
                        "a storage key is a " + key_value.tagKind() + ", not a str");
    const std::string& key = key_value.toStringRef();
    auto found = pending.find(key);
    if (found == pending.end())
      fail<FormatError>(
          "checkpoint.legacy.unused_storage",
          "the file holds data for storage '" + key + "', which its object does not use");
    LegacyStorage& storage = found->second;
    if (storage.filled)
      fail<FormatError>("checkpoint.legacy.duplicate_storage",
                        "the file holds data for storage '" + key + "' twice");
    if (rest.size() < 8)
      fail<FormatError>("checkpoint.legacy.truncated",
                        "truncated: storage '" + key + "' lacks its element count");
    const std::uint64_t numel = load_le(reinterpret_cast<const unsigned char*>(rest.data()), 8);
    rest.remove_prefix(8);
    if (numel != storage.numel) {
      fail<FormatError>("checkpoint.legacy.storage_size_mismatch",
                        "storage '" + key + "' holds " + std::to_string(numel) +
                            " elements in the file but " + std::to_string(storage.numel) +
                            " in its persistent id");
    }
    const std::uint64_t nbytes = numel * c10::elementSize(storage.dtype);
    if (rest.size() < nbytes) {
      fail<FormatError>("checkpoint.legacy.truncated", "truncated: storage '" + key + "' needs " +
                                                           std::to_string(nbytes) + " bytes, " +
                                                           std::to_string(rest.size()) + " remain");
    }
    if (nbytes != 0) std::memcpy(storage.data, rest.data(), static_cast<std::size_t>(nbytes));
    if (big_endian) swap_bytes(storage.data, nbytes, storage.dtype);
    rest.remove_prefix(static_cast<std::size_t>(nbytes));
    storage.filled = true;
  }
  for (const auto& [key, storage] : pending) {
    if (!storage.filled)
      fail<FormatError>("checkpoint.legacy.missing_storage",
                        "storage '" + key + "' has no data in the file");
  }
}

/// torch.save's legacy format: pickles of the magic number, the protocol version, the writer's
/// sys_info and the object (whose persistent ids name storages by key), a pickled list of the
/// storage keys, then for each key in that order its element count (int64, little-endian) and
/// bytes. As torch.load does, storages are allocated when the object's pickle names them and
/// filled from the data after the pickles; every one must be filled exactly once, from data
/// inside the file. The file has no checksums.
template <class Unpickle>
auto read_legacy(const caffe2::serialize::ReadAdapterInterface& in, Unpickle unpickle) {
  // The whole file, once: its pickles come first and the storages' bytes after them.
  std::string file(in.size(), '\0');
  read_exactly(in, 0, file.data(), file.size(), "the legacy file");
  std::string_view rest(file);
  rest.remove_prefix(kLegacyMagic.size());
  if (rest.substr(0, kLegacyProtocol.size()) != kLegacyProtocol) {
    fail<FormatError>("checkpoint.legacy.bad_protocol",
                      "legacy torch.save file whose protocol version is not 1001");
  }
  rest.remove_prefix(kLegacyProtocol.size());
  const std::uint64_t held = file.size() + kUncounted;
  const std::uint64_t budget = budget_for(in.size(), held);
  const std::string rule = budget_rule(in.size(), held, "the file's bytes");
  PickleEnd end;
  const bool big_endian = legacy_big_endian(rest, budget, rule, end);
  LegacyStorages pending;
  auto result = unpickle(
      rest,
      [&](const std::string& key, c10::ScalarType dtype, std::uint64_t numel) {
        // The unpickler has checked numel * element size against overflow and its budget; the
        // bytes must also lie in the file, after the pickles.
        const std::uint64_t nbytes = numel * c10::elementSize(dtype);
        if (nbytes > file.size()) {
          fail<FormatError>("checkpoint.legacy.storage_too_large",
                            "storage '" + key + "' of " + std::to_string(nbytes) +
                                " bytes is larger than the file");
        }
        at::DataPtr data = c10::GetCPUAllocator()->allocate(static_cast<std::size_t>(nbytes));
        pending.emplace(key, LegacyStorage{data.get(), numel, dtype, false});
        return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<std::int64_t>(nbytes),
                            std::move(data), c10::GetCPUAllocator(), /*resizable=*/false);
      },
      budget, rule, &end);
  rest.remove_prefix(end.consumed);
  const c10::IValue keys = unpickle_object(rest, no_legacy_storages, end.budget_left, rule, &end);
  rest.remove_prefix(end.consumed);
  fill_legacy_storages(rest, keys, pending, big_endian);
  return result;
}

/// Checks the archive, works out the budget and runs `unpickle` (unpickle_state_dict or
/// unpickle_object) on its data.pkl with the archive's records as storages. A file in the
/// legacy format goes to read_legacy.
template <class Unpickle>
auto read_archive(const caffe2::serialize::ReadAdapterInterface& in, const LoadOptions& options,
                  const std::shared_ptr<const MappedFile>& mapped, Unpickle unpickle) {
  if (is_legacy(in)) return read_legacy(in, unpickle);
  const ZipArchive archive(in, options.verify_crc32);
  bool big_endian = false;
  if (const ZipRecord* byteorder = archive.find("byteorder")) {
    const std::string order = read_string(archive, *byteorder);
    if (order != "little" && order != "big")
      fail<FormatError>("checkpoint.torch_save.bad_byteorder", "unknown byteorder '" + order + "'");
    big_endian = order == "big";
  }
  const ZipRecord* pickle = archive.find("data.pkl");
  if (pickle == nullptr)
    fail<FormatError>("checkpoint.torch_save.no_pickle",
                      "the archive has no data.pkl; not a torch.save file");
  const at::DataPtr pickle_data = archive.read(*pickle);
  const std::string_view bytes(static_cast<const char*>(pickle_data.get()),
                               static_cast<std::size_t>(pickle->size));
  // The pickle's bytes, read above, and the archive's index count against the budget too.
  const std::uint64_t held = pickle->size + archive.index_bytes() + kUncounted;
  const std::uint64_t budget = budget_for(in.size(), held);
  const std::string rule = budget_rule(in.size(), held, "its pickle and zip index");
  return unpickle(
      bytes,
      [&](const std::string& key, c10::ScalarType dtype, std::uint64_t numel) {
        return load_record(archive, key, dtype, numel, big_endian, mapped);
      },
      budget, rule, nullptr);
}

/// Writes the archive: data.pkl, byteorder, then record data/<i> for tensors[i]. Pickling has
/// checked every tensor before the first byte is written; each is converted to a CPU contiguous
/// copy one record at a time.
template <class Tensors>
void write_archive(const std::string& pickle, const Tensors& tensors, Sink& out) {
  caffe2::serialize::PyTorchStreamWriter writer(
      std::function<std::size_t(const void*, std::size_t)>([&](const void* data, std::size_t n) {
        out.write(data, n);
        return n;
      }));
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  std::size_t i = 0;
  for (const at::Tensor& tensor : tensors) {
    const at::Tensor data = writable_tensor(tensor);
    static const char kNothing = 0;
    const void* bytes = data.nbytes() == 0 ? &kNothing : data.data_ptr();
    writer.writeRecord("data/" + std::to_string(i++), bytes, data.nbytes());
  }
  writer.writeEndOfFile();
}

}  // namespace

StateDict read_torch_save(const caffe2::serialize::ReadAdapterInterface& in,
                          const LoadOptions& options,
                          const std::shared_ptr<const MappedFile>& mapped) {
  return read_archive(in, options, mapped, unpickle_state_dict);
}

c10::IValue read_torch_save_object(const caffe2::serialize::ReadAdapterInterface& in,
                                   const LoadOptions& options) {
  return read_archive(in, options, nullptr, unpickle_object);
}

void write_torch_save(const StateDict& state_dict, Sink& out) {
  const std::string pickle = pickle_state_dict(state_dict);
  std::vector<at::Tensor> tensors;
  tensors.reserve(state_dict.size());
  for (const auto& [key, tensor] : state_dict) tensors.push_back(tensor);
  write_archive(pickle, tensors, out);
}

void write_torch_save_object(const c10::IValue& object, Sink& out) {
  ObjectPickler pickler;
  const std::string pickle = pickler.pickle(object);
  write_archive(pickle, pickler.tensors(), out);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
