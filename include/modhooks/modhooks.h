// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// The umbrella header: modhooks' public API but the `dist` component (`modhooks/dist.h`) and
/// the device layer's `device/backend.h` and `device/acl_library.h`.
#include "modhooks/checkpoint/checkpoint.h"
#include "modhooks/checkpoint/model_io.h"
#include "modhooks/checkpoint/object.h"
#include "modhooks/core/error.h"
#include "modhooks/core/handle.h"
#include "modhooks/device/grad.h"
#include "modhooks/jit/call.h"
#include "modhooks/jit/instrument.h"
#include "modhooks/nn/call.h"
#include "modhooks/nn/modules.h"
#include "modhooks/nn/sequential.h"
#include "modhooks/nn/submodule.h"
#include "modhooks/nn/utils.h"
#include "modhooks/optim/adam.h"
#include "modhooks/optim/optim.h"
#include "modhooks/register.h"
#include "modhooks/state/module_state.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/state/state_hooks.h"
#include "modhooks/version.h"
