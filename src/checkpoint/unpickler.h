// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Gives the unpickler the bytes of storage `key` ("data/<key>" in the archive) as a storage of
/// `numel` elements of `dtype` in host byte order. Called once per key.
using StorageLoader =
    std::function<c10::Storage(const std::string& key, c10::ScalarType dtype, std::uint64_t numel)>;

/// Where a pickle ended, for files of several pickles in a row (the legacy format): the bytes up
/// to and including its STOP, and what is left of the budget with the result still held.
struct PickleEnd {
  std::size_t consumed = 0;
  std::uint64_t budget_left = 0;
};

/// Runs the `data.pkl` of a torch.save archive and returns the state dict it describes.
///
/// This is not Python's unpickler: it knows the protocol 2-5 opcodes torch.save writes for
/// weights-only objects and a handful of globals (collections.OrderedDict and Counter, the
/// torch._utils tensor and parameter rebuild functions, torch.*Storage, torch.UntypedStorage,
/// dtypes, torch.Size, torch.device, complex), so nothing in a file can run code. Every other
/// global, opcode or object shape raises modhooks::Error naming it and its offset. Containers can
/// neither nest deeper than a small bound nor contain themselves.
///
/// Every allocation the unpickling makes is charged in full against `budget` bytes before it is
/// made, and refunded only once it is freed (a vector's old buffer after it grew, a temporary):
/// stack, memo and container slots (16 bytes each, vectors charged at each growth), strings,
/// containers, storages (their bytes, StorageImpl and index entry), tensors (TensorImpl and
/// libtorch's objects beside it, at an upper bound), and the returned state dict's entries. So
/// the unpickling never holds more than `budget` bytes; a pickle that asks for more fails with an
/// error that quotes `budget_rule`, which says how the caller set the budget. `end`, where given,
/// receives where the pickle ended.
StateDict unpickle_state_dict(std::string_view pickle, const StorageLoader& load_storage,
                              std::uint64_t budget, const std::string& budget_rule,
                              PickleEnd* end = nullptr);

/// The same machine, returning the pickle's object as an IValue (load_object): dicts and
/// OrderedDicts as GenericDicts in insertion order (an OrderedDict's `_metadata` is dropped),
/// lists, tuples (torch.Size too), None, bools, ints, floats, complex numbers, strings,
/// devices, dtypes (as the int of their ScalarType), tensors and storages. The conversion is
/// charged against the same budget: containers, strings and dict entries at upper bounds of
/// what libtorch allocates for them; a container the object refers to twice stays one object.
c10::IValue unpickle_object(std::string_view pickle, const StorageLoader& load_storage,
                            std::uint64_t budget, const std::string& budget_rule,
                            PickleEnd* end = nullptr);

}  // namespace detail
MODHOOKS_END_NAMESPACE
