// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The torch.save reader end to end: modhooks' zip layout check, libtorch's zip reader, the
// unpickler and the records, over the bytes `modhooks::load` would read from a file.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return modhooks_fuzz::check_reader(data, size, modhooks::detail::CheckpointFormat::kTorchSave);
}
