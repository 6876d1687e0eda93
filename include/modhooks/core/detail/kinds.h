// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// The two kinds of module the dispatch layer serves, declared only: it names them in its
/// templates and global tables without depending on either adapter.
namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch
