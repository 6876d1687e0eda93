// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

/// Writes task "tensor"'s files on a thread of its own, so that a hook only copies its tensor:
/// the copies waiting hold at most `budget` bytes (a hook that would pass it waits for the
/// thread, unless nothing waits), each file is complete or absent (modhooks::save_object writes
/// a temporary and renames it), and a failure is kept for `wait()` to raise, naming the file.
/// A written copy's buffer is kept for the next copy of its size (each step dumps the same
/// sizes again), within the same budget: fresh buffers cost the system's page faults on every
/// copy, which was a third of what the dump added to a step.
class TensorWriter {
 public:
  explicit TensorWriter(std::size_t budget);
  TensorWriter(const TensorWriter&) = delete;
  TensorWriter& operator=(const TensorWriter&) = delete;
  /// Writes what is queued, then ends the thread.
  ~TensorWriter();

  /// A contiguous host copy of `tensor` for `write`, in a kept buffer of its size where one is
  /// free.
  at::Tensor copy(const at::Tensor& tensor);
  /// Queues `tensor` (a copy from `copy`, which no one else holds) for `path`.
  void write(at::Tensor tensor, std::string path);
  /// Returns once every queued file is written; RuntimeError `probe.dump.write_failed` naming
  /// the first file that could not be written since the last call (the others were written).
  void wait();
  /// `wait()` that returns that failure's text rather than raising it, for a destructor.
  std::optional<std::string> drain();

 private:
  void run();

  std::size_t budget_;
  std::mutex mutex_;
  std::condition_variable work_;  // a job was queued, or the writer is ending
  std::condition_variable room_;  // a job was written
  std::deque<std::pair<at::Tensor, std::string>> jobs_;
  std::size_t queued_bytes_ = 0;
  std::unordered_multimap<std::size_t, c10::Storage> kept_;  // written buffers, by size
  std::size_t kept_bytes_ = 0;  // queued_bytes_ + kept_bytes_ <= budget_, past the first job
  bool writing_ = false;
  bool ending_ = false;
  std::optional<std::string> failure_;
  std::thread thread_;
};

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
