// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The unpickler alone, on a bare data.pkl: the zip around it in a torch.save file costs the
// fuzzer most mutations before one reaches the pickle, so here every byte is pickle.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "modhooks/core/error.h"
#include "unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto sd = modhooks_fuzz::accepted(data, size, [&](std::string_view bytes) {
    return modhooks::detail::unpickle_state_dict(bytes, modhooks_fuzz::fake_record,
                                                 modhooks_fuzz::pickle_budget(size),
                                                 modhooks_fuzz::kPickleBudgetRule);
  });
  if (sd) modhooks_fuzz::check_round_trip(*sd, modhooks::detail::CheckpointFormat::kTorchSave);
  return 0;
}
