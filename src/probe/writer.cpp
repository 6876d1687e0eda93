// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "writer.h"

#include "modhooks/checkpoint/object.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

TensorWriter::TensorWriter(std::size_t budget) : budget_(budget), thread_([this] { run(); }) {}

TensorWriter::~TensorWriter() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void TensorWriter::write(at::Tensor tensor, std::string path) {
  const std::size_t bytes = tensor.nbytes();
  std::unique_lock<std::mutex> lock(mutex_);
  room_.wait(lock, [&] { return queued_bytes_ == 0 || queued_bytes_ + bytes <= budget_; });
  queued_bytes_ += bytes;
  jobs_.emplace_back(std::move(tensor), std::move(path));
  lock.unlock();
  work_.notify_one();
}

void TensorWriter::wait() {
  if (std::optional<std::string> failed = drain()) {
    modhooks::detail::fail<RuntimeError>(
        "probe.dump.write_failed", "modhooks::probe could not write a tensor file: " + *failed);
  }
}

std::optional<std::string> TensorWriter::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  room_.wait(lock, [&] { return jobs_.empty() && !writing_; });
  return std::exchange(failure_, std::nullopt);
}

void TensorWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return !jobs_.empty() || ending_; });
    if (jobs_.empty()) return;
    auto [tensor, path] = std::move(jobs_.front());
    jobs_.pop_front();
    writing_ = true;
    lock.unlock();
    std::optional<std::string> failed;
    try {
      modhooks::save_object(tensor, path);
    } catch (const std::exception& e) {
      failed = e.what();
    }
    const std::size_t bytes = tensor.nbytes();
    tensor = at::Tensor();
    lock.lock();
    writing_ = false;
    queued_bytes_ -= bytes;
    if (failed && !failure_) failure_ = std::move(failed);
    room_.notify_all();
  }
}

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
