// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// NCCL, where CMake found libtorch's CUDA part and NCCL's headers (MODHOOKS_DIST_NCCL=1).
#include "dist_detail.h"
#include "modhooks/dist/process_group.h"

#if MODHOOKS_DIST_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

MODHOOKS_BEGIN_NAMESPACE
namespace dist {

bool is_nccl_available() { return MODHOOKS_DIST_NCCL != 0; }

namespace detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
#if MODHOOKS_DIST_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  modhooks::detail::fail<RuntimeError>("dist.init.nccl_unavailable",
                                       "modhooks: NCCL is not compiled into modhooks::dist");
#endif
}

}  // namespace detail
}  // namespace dist
MODHOOKS_END_NAMESPACE
