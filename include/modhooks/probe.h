// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// Precision dumps that msprobe compares (the `probe` component, target `modhooks::probe`):
/// `Config` (msprobe's config.json) and `PrecisionDebugger`; see docs/probe.md.
#include "modhooks/probe/config.h"
#include "modhooks/probe/debugger.h"
