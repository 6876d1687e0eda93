// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The torch.save reader end to end: modhooks' zip layout check, libtorch's zip reader, the
// unpickler and the records, over the bytes `modhooks::load` would read from a file.
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
        std::string_view(reinterpret_cast<const char*>(data), size), CheckpointFormat::kTorchSave);
  } catch (const modhooks::Error&) {
    return 0;  // rejected, as hostile input should be; any other exception escapes and aborts
  }
  modhooks_fuzz::check_round_trip(sd, CheckpointFormat::kTorchSave);
  return 0;
}
