// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The ids of the errors of a kind's points (docs/errors.md): static strings, as every id is.
struct PointErrorIds {
  const char* keep_failed;           // "aoti.point.keep_failed"
  const char* bad_replacement;       // "aoti.hook.bad_replacement"
  const char* replacement_mismatch;  // "aoti.hook.replacement_mismatch"
};

/// The tensors of a replacement `value` for what the compiled graph holds at point `point`,
/// `expected`: each of the same sizes, dtype and device, since the kernels after the point were
/// compiled for those. `what` names it in errors ("args", "output"); `single`: the graph holds
/// one tensor there, not a tuple; `ids`: the kind's.
std::vector<at::Tensor> replacement(const std::string& point, const PointErrorIds& ids,
                                    const char* what, const c10::IValue& value,
                                    at::TensorList expected, bool single);

/// Writes `xs` into `outs`, the new tensors the program allocated for a copying point.
void write_copies(at::TensorList outs, at::TensorList xs);

/// Writes a hook's replacement `values`, if any, into `targets`, the tensors the program reads
/// after the point (a replacement may itself be a view of them).
void write_replacement(at::TensorList targets, const std::vector<at::Tensor>* values);

}  // namespace detail
MODHOOKS_END_NAMESPACE
