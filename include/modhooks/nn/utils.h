// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Python's `torch.nn.utils` built on hooks, for `torch::nn` modules (docs/nn_utils.md).

#include "modhooks/nn/utils/member.h"
#include "modhooks/nn/utils/parametrizations.h"
#include "modhooks/nn/utils/parametrize.h"
#include "modhooks/nn/utils/prune.h"
#include "modhooks/nn/utils/spectral_norm.h"
#include "modhooks/nn/utils/weight_norm.h"
