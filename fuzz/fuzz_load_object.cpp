// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// load_object's unpickler on a bare data.pkl (as fuzz_unpickler does for state dicts): any
// weights-only object, nested containers, shared ones and tensors of fake records. What it
// accepts, save_object's writer must write and load_object read back unchanged.
#include <ATen/core/ivalue.h>
#include <c10/util/complex.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "formats.h"
#include "fuzz_check.h"
#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/core/error.h"
#include "unpickler.h"

namespace {

class StringSink final : public modhooks::detail::Sink {
 public:
  void write(const void* data, std::size_t size) noexcept override {
    bytes.append(static_cast<const char*>(data), size);
  }
  std::string bytes;
};

/// Bytes the object's tensors take once written densely; the round trip skips objects whose
/// zero-stride views would make the fuzzer's own copies large.
std::uint64_t dense_bytes(const c10::IValue& value, int depth = 0) {
  if (depth > 64) return 0;
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? t.numel() * t.element_size() : 0;
  }
  std::uint64_t total = 0;
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) total += dense_bytes(entry.value(), depth + 1);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) total += dense_bytes(item, depth + 1);
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      total += dense_bytes(item, depth + 1);
    }
  }
  return total;
}

/// Same structure, keys and order; tensors bit for bit; floats by their bits.
bool same(const c10::IValue& a, const c10::IValue& b) {
  if (a.tagKind() != b.tagKind()) return false;
  if (a.isTensor()) return modhooks_fuzz::identical(a.toTensor(), b.toTensor());
  if (a.isStorage()) {
    const c10::Storage& x = a.toStorage();
    const c10::Storage& y = b.toStorage();
    return x.nbytes() == y.nbytes() &&
           (x.nbytes() == 0 || std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
  }
  if (a.isDouble()) {
    const double x = a.toDouble();
    const double y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isComplexDouble()) {
    const c10::complex<double> x = a.toComplexDouble();
    const c10::complex<double> y = b.toComplexDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isGenericDict()) {
    const auto x = a.toGenericDict();
    const auto y = b.toGenericDict();
    if (x.size() != y.size()) return false;
    auto it = y.begin();
    for (const auto& entry : x) {
      if (!same(entry.key(), it->key()) || !same(entry.value(), it->value())) return false;
      ++it;
    }
    return true;
  }
  if (a.isList() || a.isTuple()) {
    const auto x = a.isList() ? a.toListRef() : a.toTupleRef().elements();
    const auto y = b.isList() ? b.toListRef() : b.toTupleRef().elements();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!same(x[i], y[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto loaded = modhooks_fuzz::accepted(data, size, [&](std::string_view bytes) {
    return modhooks::detail::unpickle_object(bytes, modhooks_fuzz::fake_record,
                                             modhooks_fuzz::pickle_budget(size),
                                             modhooks_fuzz::kPickleBudgetRule);
  });
  if (!loaded) return 0;
  const c10::IValue& object = *loaded;
  constexpr std::uint64_t kMaxDenseBytes = 1 << 24;
  if (dense_bytes(object) > kMaxDenseBytes) return 0;
  StringSink sink;
  modhooks::detail::write_torch_save_object(object, sink);
  const c10::IValue back = modhooks::detail::load_object_from_bytes(sink.bytes);
  if (!same(object, back))
    modhooks_fuzz::violated("save_object then load_object changed the object");
  return 0;
}
