// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "byte_io.h"

#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

void read_exactly(const caffe2::serialize::ReadAdapterInterface& in, std::uint64_t pos, void* buf,
                  std::size_t n, const char* what) {
  if (n == 0) return;
  std::uint64_t end = 0;
  if (add_overflows(pos, n, &end) || end > in.size()) {
    fail<FormatError>("checkpoint.io.truncated", std::string(what) + ": " + std::to_string(n) +
                                                     " bytes at offset " + std::to_string(pos) +
                                                     " lie beyond the end of the " +
                                                     std::to_string(in.size()) + "-byte file");
  }
  if (in.read(pos, buf, n, what) != n) {
    fail<RuntimeError>("checkpoint.io.read_failed", std::string(what) + ": short read of " +
                                                        std::to_string(n) + " bytes at offset " +
                                                        std::to_string(pos));
  }
}

bool is_utf8(std::string_view s, bool surrogates) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t extra = 0;
    std::uint32_t min = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, min = 0x80, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, min = 0x800, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, min = 0x10000, code = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xC0) != 0x80) return false;
      code = (code << 6) | (cont & 0x3F);
    }
    if (code < min || code > 0x10FFFF) return false;
    if (!surrogates && code >= 0xD800 && code <= 0xDFFF) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
