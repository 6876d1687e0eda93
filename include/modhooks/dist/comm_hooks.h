// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <functional>
#include <memory>

namespace modhooks {
namespace dist {

/// A communication hook for `DistributedDataParallel::register_comm_hook`: what each gradient
/// bucket goes through instead of the Reducer's all-reduce (Python's
/// `ddp.register_comm_hook(state, hook)`). Made by the functions of `comm_hooks`, or from a
/// function of one's own that gets the bucket and returns a future of its reduced buffer.
class CommHook {
 public:
  /// A hook as Python writes it: `hook(bucket) -> Future` whose value is the reduced bucket
  /// tensor (or a list whose first element is). The process group is
  /// `DistributedDataParallel::process_group()`.
  using Function = std::function<c10::intrusive_ptr<c10::ivalue::Future>(c10d::GradBucket&)>;

  /* implicit */ CommHook(Function function);

  /// One of c10d's built-in hooks, which the Reducer runs itself (`register_builtin_comm_hook`).
  enum class Builtin { kAllReduce, kFp16Compress };
  static CommHook builtin(Builtin type);

  /// A hook built for the DDP's process group when it is registered.
  using Factory = std::function<std::unique_ptr<c10d::CommHookInterface>(
      const c10::intrusive_ptr<c10d::ProcessGroup>&)>;
  static CommHook from_factory(Factory factory);

  bool is_builtin() const { return !factory_; }
  Builtin builtin_type() const { return builtin_; }
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

/// `allreduce_hook`: divides each bucket by the world size and all-reduces it (c10d's built-in
/// ALLREDUCE hook; the result equals DDP without a hook).
CommHook allreduce();

/// `fp16_compress_hook`: casts the bucket to float16, divides it by the world size, all-reduces
/// it and casts back (c10d's built-in FP16_COMPRESS hook).
CommHook fp16_compress();

/// `bf16_compress_hook`: the same in bfloat16 (a C++ hook of modhooks': c10d has no built-in
/// one). Needs a backend that reduces bfloat16 (Gloo of libtorch 2.x and NCCL do; Gloo of 1.13
/// does not).
CommHook bf16_compress();

}  // namespace comm_hooks
}  // namespace dist
}  // namespace modhooks
