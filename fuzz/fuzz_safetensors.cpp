// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The safetensors reader: header length, JSON header, dtype/shape/offset validation, tensor data.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "modhooks/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using modhooks::detail::CheckpointFormat;
  modhooks::StateDict sd;
  try {
    sd = modhooks::detail::load_from_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size),
        CheckpointFormat::kSafetensors);
  } catch (const modhooks::Error&) {
    return 0;  // rejected, as hostile input should be; any other exception escapes and aborts
  }
  modhooks_fuzz::check_round_trip(sd, CheckpointFormat::kSafetensors);
  return 0;
}
