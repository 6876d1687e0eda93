// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace detail {

/// The first line of a libtorch message (c10::Error appends a C++ stack trace).
inline std::string first_line(const std::string& text) {
  auto end = text.find("\nException raised from");
  return end == std::string::npos ? text : text.substr(0, end);
}

/// Runs `f`, turning what libtorch and gloo raise into `modhooks::Error`.
template <class F>
void translate(const char* what, F&& f) {
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    modhooks::detail::fail<RuntimeError>(
        "dist.backend.call_failed",
        std::string("modhooks: ") + what + " failed: " + first_line(e.what()));
  }
}

/// Raises, on every rank alike, where the ranks' `params` differ in count, shapes, strides or
/// dtypes (an allgather of a fixed size, which cannot hang on the difference). `who` and `what`
/// name the caller and what it counts in the message; `error_id` is the error's id.
void verify_same_model(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                       const std::vector<at::Tensor>& params, const char* error_id, const char* who,
                       const char* what);

/// The NCCL backend (src/dist/nccl.cpp); raises where NCCL is not compiled in.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
MODHOOKS_END_NAMESPACE
