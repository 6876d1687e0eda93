// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// State shared by the three fake ACL libraries; implemented in fake_acl_control.cpp.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace fake_acl {

/// Device memory is host memory; these are the ranges a queued task reads or writes.
struct Range {
  const void* begin;
  size_t size;
};

/// Work queued on a stream runs only when the stream is synchronised, so a backend that forgets
/// to synchronise reads stale results, and one that frees memory too early is caught.
struct Task {
  std::vector<Range> touches;
  std::function<void()> run;
};

struct Stream {
  int id;
  int32_t device;
  std::vector<Task> pending;
};

/// The fake's one lock; every entry point holds it for its whole body.
std::recursive_mutex& mutex();

/// Logs `api` with `args` and returns the error injected for this call, or 0.
int enter(const char* api, const std::string& args);
/// Sets this thread's recent error message and returns `code`.
int fail(int code, const std::string& message);
void violation(const std::string& what);

/// 0 when ACL is initialised and this thread has bound a device, else the real runtime's code.
int require_context(const char* api);
bool initialised();
void set_initialised(bool value);
int32_t& thread_device();
int device_count();
const char* recent_error();

void* allocate(size_t size, int32_t device);
/// False if `p` is not the start of a live allocation.
bool release(void* p);
/// Whether [p, p + size) lies inside one live allocation.
bool is_device_range(const void* p, size_t size);

Stream* create_stream(int32_t device);
bool is_stream(const void* stream);
void enqueue(Stream* stream, Task task);
void run_pending(Stream* stream);
void drop_pending(Stream* stream);

void count_object(int delta);
uint64_t workspace_size();

}  // namespace fake_acl
