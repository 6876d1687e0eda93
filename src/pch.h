// SPDX-License-Identifier: BSD-3-Clause
// Precompiled header of the library: the heavy, stable libtorch includes only.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>
