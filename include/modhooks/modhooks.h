// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The umbrella header: everything of modhooks' public API.
#include "modhooks/core/error.h"
#include "modhooks/core/handle.h"
#include "modhooks/nn/call.h"
#include "modhooks/nn/register.h"
#include "modhooks/nn/sequential.h"
#include "modhooks/version.h"
