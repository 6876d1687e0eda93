// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// Inlines a function, or a lambda (placed after its parameters), into every caller: for the few
/// helpers of a hooked call, whose code must stay in one piece (see `CallImpl::run`).
/// `MODHOOKS_COLD` keeps a rarely taken part of such a helper out of it.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_ALWAYS_INLINE __attribute__((always_inline))
#define MODHOOKS_COLD __attribute__((noinline, cold))
#else
#define MODHOOKS_ALWAYS_INLINE
#define MODHOOKS_COLD
#endif

/// A thread-local variable of a trivial type that a hooked call reads inline from the caller's
/// code: GNU's `__thread` is one load relative to the thread pointer, where an `extern
/// thread_local` declared before C++20's `constinit` also calls its initialisation wrapper.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_THREAD_LOCAL __thread
#else
#define MODHOOKS_THREAD_LOCAL thread_local
#endif
