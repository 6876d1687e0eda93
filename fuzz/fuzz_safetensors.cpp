// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The safetensors reader: header length, JSON header, dtype/shape/offset validation, tensor data.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return modhooks_fuzz::check_reader(data, size, modhooks::detail::CheckpointFormat::kSafetensors);
}
