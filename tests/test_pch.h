// Precompiled header of the test executables: the heavy, stable includes only.
#pragma once
#include <gtest/gtest.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>
