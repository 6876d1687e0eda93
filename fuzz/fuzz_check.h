// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "modhooks/checkpoint/detail/checkpoint_bytes.h"
#include "modhooks/core/error.h"
#include "modhooks/state/state_dict.h"

namespace modhooks_fuzz {

/// A broken invariant is a finding like a crash: libFuzzer saves the input on abort.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "modhooks fuzz invariant violated: %s\n", what.c_str());
  std::abort();
}

/// What `read(bytes)` returns for the input as bytes, or nothing where it raises modhooks::Error:
/// rejected, as hostile input should be; any other exception escapes and aborts.
template <class Read>
auto accepted(const std::uint8_t* data, std::size_t size, Read&& read)
    -> std::optional<decltype(read(std::string_view()))> {
  try {
    return read(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const modhooks::Error&) {
    return std::nullopt;
  }
}

/// The budget torch.save's reader gives the pickle of a file of the pickle's size: 16 times its
/// size plus 1 MiB, less the pickle's own bytes; `kPickleBudgetRule` is how errors quote it.
inline std::uint64_t pickle_budget(std::size_t size) {
  return 15 * std::uint64_t{size} + (std::uint64_t{1} << 20);
}
inline const std::string kPickleBudgetRule = "16 times the pickle's size plus 1 MiB";

/// Stands in for a torch.save archive's records behind a bare pickle: any storage up to a bound
/// exists, filled with a pattern; a larger one is missing, as a record the zip does not hold
/// would be.
inline c10::Storage fake_record(const std::string& key, c10::ScalarType dtype,
                                std::uint64_t numel) {
  constexpr std::uint64_t kMaxRecordBytes = 1 << 16;
  std::uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, c10::elementSize(dtype), &nbytes) || nbytes > kMaxRecordBytes) {
    modhooks::detail::fail<modhooks::FormatError>("checkpoint.torch_save.missing_record",
                                                  "no record data/" + key);
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<std::int64_t>(nbytes),
                       c10::GetCPUAllocator(), /*resizable=*/false);
  if (nbytes != 0) std::memset(storage.mutable_data(), 0x5a, nbytes);
  return storage;
}

/// Same dtype, sizes and bytes: NaNs and -0.0 compare by their bits, as a file stores them.
inline bool identical(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous();
  const at::Tensor cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

/// Bytes a loaded state dict's tensors take once made contiguous. A view may stretch a small
/// storage with zero strides, so this can exceed the file; the round trip skips such dicts
/// rather than let the fuzzer's own copies run out of memory.
inline std::uint64_t dense_bytes(const modhooks::StateDict& sd) {
  std::uint64_t total = 0;
  for (const auto& [key, tensor] : sd) total += tensor.numel() * tensor.element_size();
  return total;
}

/// What a loader accepted, the writer of the same format must write and the loader read back
/// unchanged: keys in order, tensors bit for bit, and `_metadata` for torch.save files.
inline void check_round_trip(const modhooks::StateDict& sd,
                             modhooks::detail::CheckpointFormat format) {
  constexpr std::uint64_t kMaxDenseBytes = 1 << 24;
  if (dense_bytes(sd) > kMaxDenseBytes) return;
  const std::string bytes = modhooks::detail::save_to_bytes(sd, format);
  const modhooks::StateDict back = modhooks::detail::load_from_bytes(bytes, format);
  if (back.size() != sd.size()) violated("round trip changed the number of entries");
  auto it = back.begin();
  for (const auto& [key, tensor] : sd) {
    if (it->first != key) violated("round trip reordered or renamed '" + key + "'");
    if (!identical(it->second, tensor)) violated("round trip changed the tensor of '" + key + "'");
    ++it;
  }
  if (format == modhooks::detail::CheckpointFormat::kTorchSave &&
      back.metadata().size() != sd.metadata().size()) {
    violated("round trip changed _metadata");
  }
}

/// The body of a target over one checkpoint reader: what it accepts in `format`, its writer must
/// write and it must read back unchanged.
inline int check_reader(const std::uint8_t* data, std::size_t size,
                        modhooks::detail::CheckpointFormat format) {
  const auto sd = accepted(data, size, [format](std::string_view bytes) {
    return modhooks::detail::load_from_bytes(bytes, format);
  });
  if (sd) check_round_trip(*sd, format);
  return 0;
}

}  // namespace modhooks_fuzz
