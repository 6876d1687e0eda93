// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <c10/util/string_view.h>

#include <cstddef>

#include "modhooks/points/detail/tensor_view.h"
#include "modhooks/version.h"

// What hooks at a point of a compiled program (an AOTInductor package, an ExecuTorch program)
// are shown: tensors over the program's memory that stay valid where a hook keeps them.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The tensors shown at one point (its outputs or its inputs): one or a few.
using Aliases = c10::SmallVector<at::Tensor, 4>;

/// An alias of each of `xs`: a tensor over its memory with a storage object of its own. The
/// compiled program reuses its buffers once a value is dead, so a hook that keeps what it got
/// (Python users do: `acts[name] = output`) would find other values there later: see
/// `keep_valid`.
Aliases shown_aliases(at::TensorList xs);

/// Tensors over the memory `views` describe, which a runtime other than libtorch owns: the
/// tensors a point's operator holds, which its firing writes replacements into. Drawn from the
/// thread's spare aliases as `shown_aliases` draws; `give_back` returns them. `inference`: whether
/// the run is in inference mode, which decides the tensors' dispatch keys.
Aliases tensors_over(const TensorView* views, std::size_t n, bool inference);

/// Returns `tensors` (from `tensors_over`, never shown to a hook) to the thread's spare aliases.
void give_back(Aliases& tensors) noexcept;

/// Gives each alias in `shown` that a hook kept (another owner of it or of its storage exists
/// once the hooks' values are gone) a copy of the memory of the tensor it shows, `xs[i]`; the
/// others go back to the thread's spare aliases. Where a copy fails (out of memory), the aliases
/// not yet copied are given no memory at all, so that no kept tensor can read or write what the
/// run frees or reuses, and RuntimeError `failed_id` (the kind's, "aoti.point.keep_failed")
/// names `point`.
void keep_valid(Aliases& shown, at::TensorList xs, c10::string_view point, const char* failed_id);

/// Runs `hooks` on the aliases in `shown`, then `keep_valid`: also when a hook throws, since it
/// may have kept what it was shown before it did.
template <class Hooks>
void run_keeping_valid(Aliases& shown, at::TensorList xs, c10::string_view point,
                       const char* failed_id, Hooks&& hooks) {
  try {
    hooks();
  } catch (...) {
    keep_valid(shown, xs, point, failed_id);
    throw;
  }
  keep_valid(shown, xs, point, failed_id);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
