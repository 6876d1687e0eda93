// SPDX-License-Identifier: BSD-3-Clause
// Precompiled header of the test executables: the heavy, stable includes only.
#pragma once
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>
