// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <string>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {

/// \addtogroup api_dist
/// @{

/// Python's `torch.distributed.init_process_group` keywords. Each is a `TORCH_ARG`:
/// `options.backend("nccl")` sets it and returns the options, `options.backend()` reads it.
///
/// **Example**:
/// \code
///   auto options = modhooks::dist::InitOptions().init_method("tcp://10.0.0.1:29500").rank(r)
///       .world_size(n);
/// \endcode
struct InitOptions {
  /// "gloo" (CPU tensors) or "nccl" (CUDA tensors; only where the libtorch was built with it).
  TORCH_ARG(std::string, backend) = "gloo";
  /// "env://" (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them),
  /// "tcp://host:port" or "file:///path". Rank and world size come from `rank` and `world_size`
  /// where set, else from RANK and WORLD_SIZE (and for tcp:// and file:// URLs, from their
  /// `?rank=&world_size=` query as Python reads it).
  TORCH_ARG(std::string, init_method) = "env://";
  /// This process's rank; -1 (the default): from the URL's `?rank=`, else from RANK.
  TORCH_ARG(int, rank) = -1;
  /// The number of processes; -1 (the default): from the URL's `?world_size=`, else WORLD_SIZE.
  TORCH_ARG(int, world_size) = -1;
  /// How long a rendezvous or a collective may wait for the other ranks before it raises: Python's
  /// default of 30 minutes for Gloo (10 for NCCL when left at zero).
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::milliseconds(0);
};

/// Python's `init_process_group`: connects this process to the others and makes the group all
/// collectives and `DistributedDataParallel` use by default. Under torchrun the launcher hosts the
/// store (TORCHELASTIC_USE_AGENT_STORE): this process connects to it as a client, as Python's
/// rendezvous does. Raises `modhooks::Error` on a bad URL, a missing variable, an unknown or
/// uncompiled backend, or when the other ranks do not come within the timeout.
///
/// **Example**:
/// \code
///   modhooks::dist::init_process_group();  // under torchrun: gloo, env://
/// \endcode
void init_process_group(const InitOptions& options = InitOptions());

/// Whether `init_process_group` ran (and `destroy_process_group` did not since).
///
/// **Example**:
/// \code
///   if (!modhooks::dist::is_initialized()) modhooks::dist::init_process_group();
/// \endcode
bool is_initialized();

/// This process's rank in the default group (`modhooks::Error` before `init_process_group`).
///
/// **Example**:
/// \code
///   if (modhooks::dist::get_rank() == 0) modhooks::save(modhooks::state_dict(ddp), "net.pt");
/// \endcode
int get_rank();

/// The number of processes in the default group.
///
/// **Example**:
/// \code
///   at::Tensor mean = total / modhooks::dist::get_world_size();
/// \endcode
int get_world_size();

/// The default group itself, for c10d calls of one's own (`allreduce`, `broadcast`, ...).
///
/// **Example**:
/// \code
///   std::vector<at::Tensor> tensors{loss.detach()};
///   modhooks::dist::default_group()->allreduce(tensors)->wait();
/// \endcode
c10::intrusive_ptr<c10d::ProcessGroup> default_group();

/// A barrier over the default group.
///
/// **Example**:
/// \code
///   modhooks::dist::barrier();  // every rank waits until all reach it
/// \endcode
void barrier();

/// Python's `destroy_process_group`: drops the default group (its connections close when the
/// last `DistributedDataParallel` using it goes). Safe to call when none exists.
///
/// **Example**:
/// \code
///   modhooks::dist::destroy_process_group();
/// \endcode
void destroy_process_group();

/// Whether this build of libtorch has the NCCL backend compiled in.
///
/// **Example**:
/// \code
///   auto backend = modhooks::dist::is_nccl_available() ? "nccl" : "gloo";
/// \endcode
bool is_nccl_available();

/// @}

}  // namespace dist
MODHOOKS_END_NAMESPACE
