// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "fake_acl.h"
#include "fake_acl_state.h"

namespace fake_acl {
namespace {

struct Injection {
  int error;
  int remaining;  // -1: forever
};

struct State {
  std::vector<std::string> calls;
  std::string calls_text;
  std::vector<std::string> violations;
  std::string violations_text;
  std::map<std::string, Injection> injections;
  std::map<uintptr_t, size_t> allocations;  // start -> size
  std::set<Stream*> streams;
  int next_stream_id = 1;
  long live_objects = 0;
  bool initialised = false;
  uint64_t workspace_size = 64;
};

State& state() {
  static State s;
  return s;
}

thread_local std::string t_recent_error;
thread_local int32_t t_device = -1;

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

bool overlaps(const Range& a, const void* p, size_t n) {
  auto a0 = reinterpret_cast<uintptr_t>(a.begin);
  auto b0 = reinterpret_cast<uintptr_t>(p);
  return a0 < b0 + n && b0 < a0 + a.size;
}

}  // namespace

std::recursive_mutex& mutex() {
  static std::recursive_mutex m;
  return m;
}

int enter(const char* api, const std::string& args) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  auto& s = state();
  std::string line = std::string(api) + (args.empty() ? "" : " " + args);
  auto it = s.injections.find(api);
  int code = 0;
  if (it != s.injections.end() && it->second.remaining != 0) {
    code = it->second.error;
    if (it->second.remaining > 0) --it->second.remaining;
    line += " -> " + std::to_string(code);
    fail(code, "fake ACL: injected error " + std::to_string(code) + " in " + api);
  }
  s.calls.push_back(line);
  return code;
}

int fail(int code, const std::string& message) {
  t_recent_error = message;
  return code;
}

void violation(const std::string& what) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  state().violations.push_back(what);
}

int require_context(const char* api) {
  if (!state().initialised) return fail(100001, std::string(api) + ": aclInit was not called");
  if (t_device < 0) {
    return fail(107002, std::string(api) + ": no device bound on this thread (aclrtSetDevice)");
  }
  return 0;
}

bool initialised() { return state().initialised; }
void set_initialised(bool value) { state().initialised = value; }
int32_t& thread_device() { return t_device; }
int device_count() { return 2; }
const char* recent_error() { return t_recent_error.c_str(); }

void* allocate(size_t size, int32_t device) {
  (void)device;
  // Like the real runtime: 32-byte aligned, never zero bytes.
  void* p = std::aligned_alloc(32, ((std::max<size_t>(size, 1) + 31) / 32) * 32);
  state().allocations[reinterpret_cast<uintptr_t>(p)] = size;
  return p;
}

bool release(void* p) {
  auto& s = state();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.allocations.end()) return false;
  for (Stream* stream : s.streams) {
    bool in_use = false;
    for (const Task& task : stream->pending) {
      for (const Range& r : task.touches) in_use = in_use || overlaps(r, p, it->second);
    }
    if (in_use) {
      violation("aclrtFree of memory still used by work queued on stream " +
                std::to_string(stream->id));
      run_pending(stream);
    }
  }
  std::free(p);
  s.allocations.erase(it);
  return true;
}

bool is_device_range(const void* p, size_t size) {
  auto& s = state();
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(addr);
  if (it == s.allocations.begin()) return false;
  --it;
  return addr + size <= it->first + it->second;
}

Stream* create_stream(int32_t device) {
  auto* stream = new Stream{state().next_stream_id++, device, {}};
  state().streams.insert(stream);
  return stream;
}

bool is_stream(const void* stream) {
  return state().streams.count(static_cast<Stream*>(const_cast<void*>(stream))) != 0;
}

void enqueue(Stream* stream, Task task) { stream->pending.push_back(std::move(task)); }

void run_pending(Stream* stream) {
  auto tasks = std::move(stream->pending);
  stream->pending.clear();
  for (auto& task : tasks) task.run();
}

void drop_pending(Stream* stream) { stream->pending.clear(); }

void count_object(int delta) { state().live_objects += delta; }
uint64_t workspace_size() { return state().workspace_size; }

}  // namespace fake_acl

using fake_acl::mutex;
using fake_acl::state;

extern "C" {

const char* fake_acl_calls() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  state().calls_text = fake_acl::join(state().calls);
  return state().calls_text.c_str();
}

const char* fake_acl_violations() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  state().violations_text = fake_acl::join(state().violations);
  return state().violations_text.c_str();
}

void fake_acl_reset() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  auto& s = state();
  s.calls.clear();
  s.violations.clear();
  s.injections.clear();
  s.workspace_size = 64;
}

void fake_acl_inject(const char* api, int error, int count) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  state().injections[api] = {error, count};
}

void fake_acl_set_workspace_size(uint64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  state().workspace_size = bytes;
}

long fake_acl_live_allocations() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return static_cast<long>(state().allocations.size());
}

long fake_acl_live_streams() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return static_cast<long>(state().streams.size());
}

long fake_acl_live_objects() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return state().live_objects;
}

long fake_acl_pending_tasks() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  long n = 0;
  for (auto* stream : state().streams) n += static_cast<long>(stream->pending.size());
  return n;
}
}
