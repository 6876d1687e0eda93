// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// Data-parallel training on c10d (the `dist` component, target `modhooks::dist`): process
/// groups, `DistributedDataParallel`, comm hooks. Python's `torch.distributed` and
/// `torch.nn.parallel.DistributedDataParallel`; see docs/dist.md.
#include "modhooks/dist/comm_hooks.h"
#include "modhooks/dist/ddp.h"
#include "modhooks/dist/fsdp.h"
#include "modhooks/dist/process_group.h"
#include "modhooks/modhooks.h"
