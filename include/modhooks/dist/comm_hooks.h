// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <functional>
#include <memory>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {

/// \addtogroup api_dist
/// @{

/// A communication hook for `DistributedDataParallel::register_comm_hook`: what each gradient
/// bucket goes through instead of the Reducer's all-reduce (Python's
/// `ddp.register_comm_hook(state, hook)`). Made by the functions of `comm_hooks`, or from a
/// function of one's own that gets the bucket and returns a future of its reduced buffer.
///
/// **Example**:
/// \code
///   ddp.register_comm_hook(modhooks::dist::comm_hooks::fp16_compress());
/// \endcode
class CommHook {
 public:
  /// A hook as Python writes it: `hook(bucket) -> Future` whose value is the reduced bucket
  /// tensor (or a list whose first element is). The process group is
  /// `DistributedDataParallel::process_group()`.
  using Function = std::function<c10::intrusive_ptr<c10::ivalue::Future>(c10d::GradBucket&)>;

  /// A hook that runs `function` on each bucket; an empty `function` raises `modhooks::Error`.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::dist::CommHook hook([group](c10d::GradBucket& bucket) {
  ///     std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(group->getSize())};
  ///     return group->allreduce(tensors)->getFuture();
  ///   });
  /// \endcode
  /* implicit */ CommHook(Function function);

  /// One of c10d's built-in hooks, which the Reducer runs itself (`register_builtin_comm_hook`):
  /// `kAllReduce` is c10d's ALLREDUCE, `kFp16Compress` its FP16_COMPRESS (`comm_hooks::allreduce()`
  /// and `comm_hooks::fp16_compress()` are modhooks' C++ hooks, not these).
  enum class Builtin { kAllReduce, kFp16Compress };
  /// The built-in hook `type`.
  ///
  /// **Example**:
  /// \code
  ///   using modhooks::dist::CommHook;
  ///   CommHook hook = CommHook::builtin(CommHook::Builtin::kAllReduce);
  /// \endcode
  static CommHook builtin(Builtin type);

  /// A hook built for the DDP's process group when it is registered.
  using Factory = std::function<std::unique_ptr<c10d::CommHookInterface>(
      const c10::intrusive_ptr<c10d::ProcessGroup>&)>;
  /// A hook that `factory` builds for the DDP object's process group when it is registered.
  ///
  /// **Example**:
  /// \code
  ///   auto hook = modhooks::dist::CommHook::from_factory(
  ///       [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  ///         return std::make_unique<MyCommHook>(group);  // a c10d::CommHookInterface
  ///       });
  /// \endcode
  static CommHook from_factory(Factory factory);

  /// Whether it is one of c10d's built-in hooks (`builtin_type()` tells which); a hook that is
  /// not is built by `make`. \see \ref api_dist
  bool is_builtin() const { return !factory_; }
  /// Which built-in hook it is, when `is_builtin()`. \see \ref api_dist
  Builtin builtin_type() const { return builtin_; }
  /// Builds the hook for `group`; only for a hook that is not built in. `register_comm_hook`
  /// calls it. \see \ref api_dist
  std::unique_ptr<c10d::CommHookInterface> make(
      const c10::intrusive_ptr<c10d::ProcessGroup>& group) const {
    return factory_(group);
  }

 private:
  CommHook() = default;
  Builtin builtin_ = Builtin::kAllReduce;
  Factory factory_;
};

/// Python's `torch.distributed.algorithms.ddp_comm_hooks.default_hooks`.
namespace comm_hooks {

/// `allreduce_hook`: divides each bucket by the world size and all-reduces it (a C++ hook of
/// modhooks' doing what Python's does, op for op; c10d's built-in ALLREDUCE hook, which the
/// Reducer runs itself, is `CommHook::builtin(CommHook::Builtin::kAllReduce)`).
///
/// **Example**:
/// \code
///   ddp.register_comm_hook(modhooks::dist::comm_hooks::allreduce());
/// \endcode
CommHook allreduce();

/// `fp16_compress_hook`: casts the bucket to float16, divides it by the world size, all-reduces
/// it and casts back (a C++ hook of modhooks', op for op as Python's; c10d's built-in one is
/// `CommHook::builtin(CommHook::Builtin::kFp16Compress)`).
///
/// **Example**:
/// \code
///   ddp.register_comm_hook(modhooks::dist::comm_hooks::fp16_compress());
/// \endcode
CommHook fp16_compress();

/// `bf16_compress_hook`: the same in bfloat16 (a C++ hook of modhooks' too: c10d has no
/// built-in one). Needs a backend that reduces bfloat16 (Gloo of libtorch 2.x and NCCL do; Gloo
/// of 1.13 does not).
///
/// **Example**:
/// \code
///   ddp.register_comm_hook(modhooks::dist::comm_hooks::bf16_compress());
/// \endcode
CommHook bf16_compress();

}  // namespace comm_hooks

/// @}
}  // namespace dist
MODHOOKS_END_NAMESPACE
