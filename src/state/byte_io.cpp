// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "byte_io.h"

#include "modhooks/core/error.h"

namespace modhooks {
namespace detail {

void read_exactly(const caffe2::serialize::ReadAdapterInterface& in, std::uint64_t pos, void* buf,
                  std::size_t n, const char* what) {
  if (n == 0) return;
  std::uint64_t end = 0;
  if (add_overflows(pos, n, &end) || end > in.size()) {
    fail(std::string(what) + ": " + std::to_string(n) + " bytes at offset " + std::to_string(pos) +
         " lie beyond the end of the " + std::to_string(in.size()) + "-byte file");
  }
  if (in.read(pos, buf, n, what) != n) {
    fail(std::string(what) + ": short read of " + std::to_string(n) + " bytes at offset " +
         std::to_string(pos));
  }
}

}  // namespace detail
}  // namespace modhooks
