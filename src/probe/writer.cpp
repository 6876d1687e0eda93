// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "writer.h"

#include <ATen/ATen.h>

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

at::Tensor TensorWriter::copy(const at::Tensor& tensor) {
  const std::size_t bytes = tensor.nbytes();
  std::optional<c10::Storage> buffer;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto kept = kept_.find(bytes); kept != kept_.end()) {
      buffer = std::move(kept->second);
      kept_.erase(kept);
      kept_bytes_ -= bytes;
    } else {
      // Room for a new buffer: the kept ones of other sizes go first.
      for (auto it = kept_.begin();
           it != kept_.end() && queued_bytes_ + kept_bytes_ + bytes > budget_;) {
        kept_bytes_ -= it->first;
        it = kept_.erase(it);
      }
    }
  }
  const at::TensorOptions options = tensor.options().device(at::kCPU).requires_grad(false);
  if (!buffer)
    return tensor.detach().to(options, /*non_blocking=*/false, /*copy=*/true,
                              at::MemoryFormat::Contiguous);
  at::Tensor host = at::empty({0}, options);
  host.set_(*buffer, 0, tensor.sizes());
  host.copy_(tensor.detach());
  return host;
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
    modhooks::detail::fail<RuntimeError>("probe.dump.write_failed",
                                         "modhooks: could not write a tensor file: " + *failed);
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
    c10::Storage buffer = tensor.storage();
    tensor = at::Tensor();
    lock.lock();
    writing_ = false;
    queued_bytes_ -= bytes;
    if (queued_bytes_ + kept_bytes_ + bytes <= budget_ && buffer.use_count() == 1) {
      kept_.emplace(bytes, std::move(buffer));
      kept_bytes_ += bytes;
    }
    if (failed && !failure_) failure_ = std::move(failed);
    room_.notify_all();
  }
}

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
