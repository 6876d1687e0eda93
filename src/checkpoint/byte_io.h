// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint formats are little-endian; modhooks reads them on little-endian hosts");

/// libtorch's random-access reader interface over bytes the caller keeps alive, so the zip
/// reader and the safetensors reader work the same on a file and in memory (the fuzz entry).
class MemoryReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MemoryReadAdapter(std::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    size_t available = bytes_.size() - static_cast<size_t>(pos);
    size_t count = n < available ? n : available;
    std::memcpy(buf, bytes_.data() + pos, count);
    return count;
  }

 private:
  std::string_view bytes_;
};

/// Reads exactly `n` bytes at `pos` or fails naming `what`.
void read_exactly(const caffe2::serialize::ReadAdapterInterface& in, std::uint64_t pos, void* buf,
                  std::size_t n, const char* what);

/// Whether `s` is UTF-8. With `surrogates`, encoded UTF-16 surrogates count too, as they do for
/// Python's unpickler ("surrogatepass"); JSON readers and Python's str.encode refuse them.
bool is_utf8(std::string_view s, bool surrogates);

/// Little-endian unsigned integer of `n` <= 8 bytes.
inline std::uint64_t load_le(const unsigned char* p, int n) {
  std::uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

/// Multiplication that reports overflow instead of wrapping: every size computed from
/// untrusted fields goes through here.
inline bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
