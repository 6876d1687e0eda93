// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// Tests of include/modhooks/optim/adam.h beyond Python's runs (which optim_test.cpp resumes with
// modhooks' Adam and AdamW, bit for bit): the closure, and sparse gradients refused before any
// parameter changes.
#include "modhooks/optim/adam.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "modhooks/core/error.h"

namespace {

TEST(OptimAdam, RunsTheClosureWithGradAndStepsOnItsGradients) {
  at::Tensor w = at::ones({3}).requires_grad_();
  modhooks::optim::Adam adam(std::vector<at::Tensor>{w}, torch::optim::AdamOptions(0.1));
  const at::NoGradGuard outside;  // the closure gets grad back, as libtorch's and Python's do
  const at::Tensor loss = adam.step([&] {
    adam.zero_grad();
    at::Tensor l = (w * w).sum();
    l.backward();
    return l;
  });
  EXPECT_EQ(loss.item<float>(), 3.0F);
  // The first step of Adam moves each entry by lr against its gradient's sign.
  EXPECT_TRUE(at::allclose(w, at::full({3}, 0.9)));
}

TEST(OptimAdam, RefusesASparseGradientBeforeAnyParameterChanges) {
  at::Tensor dense = at::ones({2}).requires_grad_();
  at::Tensor sparse = at::ones({4}).requires_grad_();
  modhooks::optim::AdamW adamw(std::vector<at::Tensor>{dense, sparse},
                               torch::optim::AdamWOptions(0.1));
  dense.mutable_grad() = at::ones({2});
  sparse.mutable_grad() = at::ones({4}).to_sparse();
  try {
    adamw.step();
    FAIL() << "a sparse gradient stepped";
  } catch (const modhooks::Error& e) {
    EXPECT_STREQ(e.id(), "optim.adam.sparse");
    EXPECT_STREQ(e.what(),
                 "Adam does not support sparse gradients, please consider SparseAdam instead");
  }
  EXPECT_TRUE(dense.equal(at::ones({2})));
  EXPECT_TRUE(adamw.state().empty());
}

}  // namespace
