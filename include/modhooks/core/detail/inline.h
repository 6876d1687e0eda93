// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// How a hooked call marks its hot and cold code, all from here (libtorch's `C10_LIKELY` and the
/// like are not used, so that one header says what each mark is for):
/// - `MODHOOKS_ALWAYS_INLINE` inlines a function, or a lambda (placed after its parameters), into
///   every caller: for the few helpers of a hooked call, whose code must stay in one piece (see
///   `CallImpl::run`);
/// - `MODHOOKS_COLD` keeps a rarely taken part of such a helper out of it;
/// - `MODHOOKS_NOINLINE` keeps a part that is taken often, but not on the fast exit, out of its
///   caller (nn's hooked call, out of `call`'s way when a module has no hooks);
/// - `MODHOOKS_LIKELY` / `MODHOOKS_UNLIKELY` say which way a branch inside such a helper goes.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_ALWAYS_INLINE __attribute__((always_inline))
#define MODHOOKS_COLD __attribute__((noinline, cold))
#define MODHOOKS_NOINLINE __attribute__((noinline))
#define MODHOOKS_LIKELY(x) (__builtin_expect(static_cast<bool>(x), 1))
#define MODHOOKS_UNLIKELY(x) (__builtin_expect(static_cast<bool>(x), 0))
#else
#define MODHOOKS_ALWAYS_INLINE
#define MODHOOKS_COLD
#define MODHOOKS_NOINLINE
#define MODHOOKS_LIKELY(x) (x)
#define MODHOOKS_UNLIKELY(x) (x)
#endif

/// A thread-local variable of a trivial type that a hooked call reads inline from the caller's
/// code: GNU's `__thread` is one load relative to the thread pointer, where an `extern
/// thread_local` declared before C++20's `constinit` also calls its initialisation wrapper.
#if defined(__GNUC__) || defined(__clang__)
#define MODHOOKS_THREAD_LOCAL __thread
#else
#define MODHOOKS_THREAD_LOCAL thread_local
#endif
