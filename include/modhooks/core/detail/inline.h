// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// Inlines a function, or a lambda (placed after its parameters), into every caller: for the few
/// helpers of a hooked call, whose code must stay in one piece (see `Dispatch::run`).
/// `MODHOOKS_COLD` keeps a rarely taken part of such a helper out of it.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_ALWAYS_INLINE __attribute__((always_inline))
#define MODHOOKS_COLD __attribute__((noinline, cold))
#else
#define MODHOOKS_ALWAYS_INLINE
#define MODHOOKS_COLD
#endif
