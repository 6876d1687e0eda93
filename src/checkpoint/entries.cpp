// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "entries.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

#include "byte_io.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

void check_utf8(const std::string& what, const std::string& text) {
  if (!is_utf8(text, /*surrogates=*/false)) {
    fail<ValueError>("checkpoint.save.not_utf8",
                     what + " is not valid UTF-8; Python could not read it back");
  }
}

const DtypeNames& checked_dtype(const std::string& key, const at::Tensor& tensor) {
  check_utf8("state dict key '" + key + "'", key);
  if (!tensor.defined())
    fail<ValueError>("checkpoint.save.undefined_tensor",
                     "state dict entry '" + key + "' is an undefined tensor");
  if (tensor.layout() != c10::kStrided || tensor.is_quantized()) {
    fail<ValueError>("checkpoint.save.not_dense",
                     "state dict entry '" + key + "' is not a dense tensor");
  }
  const DtypeNames* names = find_dtype(tensor.scalar_type());
  if (names == nullptr) {
    fail<ValueError>("checkpoint.save.unsupported_dtype",
                     "state dict entry '" + key + "' has dtype " +
                         c10::toString(tensor.scalar_type()) + ", which checkpoints cannot hold");
  }
  // The writers compute contiguous strides and byte sizes from the sizes (empty dimensions
  // counting as 1, as torch's strides do): they must fit in int64, which a stride-0 view of a
  // few bytes can exceed.
  std::uint64_t extent = tensor.element_size();
  for (const std::int64_t size : tensor.sizes()) {
    if (mul_overflows(extent, static_cast<std::uint64_t>(std::max<std::int64_t>(size, 1)),
                      &extent) ||
        extent > static_cast<std::uint64_t>(INT64_MAX)) {
      fail<ValueError>("checkpoint.save.too_large", "state dict entry '" + key + "' of size " +
                                                        c10::str(tensor.sizes()) +
                                                        " is too large to write contiguously");
    }
  }
  return *names;
}

at::Tensor writable_tensor(const at::Tensor& tensor) {
  return tensor.detach().to(c10::kCPU).resolve_conj().resolve_neg().contiguous();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
