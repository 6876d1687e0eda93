// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// Reads any object Python's `torch.load(path, weights_only=True)` reads from a torch.save zip
/// file, such as the checkpoint of a training script:
///
///     c10::IValue ckpt = modhooks::load_object("train.pt");
///     auto dict = ckpt.toGenericDict();
///     modhooks::StateDict model = modhooks::StateDict::from(dict.at("model"));
///     int64_t epoch = dict.at("epoch").toInt();
///
/// Python's objects become these IValues:
/// - dict, OrderedDict and Counter: c10::GenericDict in insertion order (keys str, int, float or
///   bool; its key and value types are typed, such as `Dict<str, Tensor>`, when all keys or all
///   values are ints, floats, bools, strs or tensors). An OrderedDict's `_metadata` is dropped.
/// - list: c10::GenericList (typed when every item is an int, float, bool, str or tensor);
///   tuple and torch.Size: tuple.
/// - None, bool, int (64-bit), float, complex, str; torch.device: c10::Device; a dtype: the int
///   of its c10::ScalarType (`toScalarType()` reads it back).
/// - tensors on the CPU whatever device they were saved from, views sharing their storage, as
///   `load` gives them; parameters as tensors with their `requires_grad`.
/// Sets, bytes, tensor subclasses and the other globals of Python's allow-list are refused,
/// and so are compressed archives; the legacy non-zip format is read. ".safetensors" paths give a
/// dict of names to tensors. The file's checks and its memory bound are `load`'s: corrupt,
/// truncated or hostile files raise modhooks::Error naming the path and what was wrong.
c10::IValue load_object(const std::string& path, const LoadOptions& options = {});

/// Writes `object` so that Python's `torch.load(path, weights_only=True)` returns it: dicts
/// (as dict), lists, tuples, None, bools, ints, floats, complex numbers, strings, devices and
/// tensors (each tensor object once, contiguous and on the CPU, as `save` writes them; a
/// tensor or container the object holds twice is one object in Python too). A ".safetensors"
/// path takes a mapping of names to tensors (StateDict::from). Anything else (a Future, a
/// TorchScript object, a dict key that is not a str, int, float or bool, a container that
/// contains itself) raises modhooks::Error naming the place in the object, before a byte is
/// written; an existing file is replaced only once everything is written.
///
/// **Example**:
/// \code
///   c10::impl::GenericDict ckpt(c10::StringType::get(), c10::AnyType::get());
///   ckpt.insert("model", modhooks::state_dict(net).to_ivalue());
///   ckpt.insert("epoch", 3);
///   modhooks::save_object(ckpt, "train.pt");  // torch.load("train.pt")["epoch"] == 3
/// \endcode
void save_object(const c10::IValue& object, const std::string& path);

/// @}

MODHOOKS_END_NAMESPACE
