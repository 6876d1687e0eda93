// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// The one translation unit that sees gloo's headers (through ProcessGroupGloo.hpp): consumers of
// modhooks::dist never need them.
#include "modhooks/dist/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "dist_detail.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace {

std::mutex default_group_mutex;
c10::intrusive_ptr<c10d::ProcessGroup> default_group_;

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value ? std::string(value) : fallback;
}

int to_int(const std::string& text, const std::string& what) {
  try {
    std::size_t used = 0;
    int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  modhooks::detail::fail<ValueError>("dist.init.not_an_integer",
                                     "modhooks: " + what + " is not an integer: '" + text + "'");
}

/// "tcp://host:port?rank=0&world_size=2" -> ("host:port", {rank: 0, world_size: 2}).
std::pair<std::string, std::map<std::string, std::string>> split_query(const std::string& rest) {
  std::map<std::string, std::string> query;
  auto q = rest.find('?');
  std::string body = rest.substr(0, q);
  if (q != std::string::npos) {
    std::string tail = rest.substr(q + 1);
    std::size_t start = 0;
    while (start <= tail.size()) {
      auto amp = tail.find('&', start);
      std::string item =
          tail.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      auto eq = item.find('=');
      if (eq != std::string::npos) query[item.substr(0, eq)] = item.substr(eq + 1);
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  return {body, query};
}

struct Rendezvous {
  c10::intrusive_ptr<c10d::Store> store;
  int rank;
  int world_size;
};

int pick(int option, const std::map<std::string, std::string>& query, const char* key,
         const char* env, const std::string& what) {
  if (option >= 0) return option;
  if (auto it = query.find(key); it != query.end()) return to_int(it->second, what);
  std::string value = env_or(env);
  if (value.empty()) {
    modhooks::detail::fail<ValueError>("dist.init.missing_setting",
                                       "modhooks: " + what + " is unknown: set " + env +
                                           " (torchrun does), pass InitOptions()." + key +
                                           "(...) or ?" + key + "= in the URL");
  }
  return to_int(value, env);
}

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, int rank,
                                          int world_size, std::chrono::milliseconds timeout) {
  if (port < 0 || port > 65535) {
    modhooks::detail::fail<ValueError>(
        "dist.init.bad_port",
        "port must have value from 0 to 65535 but was " + std::to_string(port) + ".");
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.numWorkers = static_cast<std::size_t>(world_size);
  opts.timeout = timeout;
  // torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT: every rank is its client, as in
  // Python's _create_c10d_store. Otherwise rank 0 hosts it (multi-tenant, as Python does).
  bool agent = env_or("TORCHELASTIC_USE_AGENT_STORE") == "True" && env_or("MASTER_ADDR") == host &&
               env_or("MASTER_PORT") == std::to_string(port);
  if (!agent) {
    opts.isServer = rank == 0;
    opts.multiTenant = true;
  }
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

Rendezvous rendezvous(const InitOptions& options, std::chrono::milliseconds timeout) {
  const std::string& url = options.init_method();
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    modhooks::detail::fail<RuntimeError>(
        "dist.init.unknown_scheme",
        "modhooks: init_method '" + url +
            "' has no scheme: use env://, tcp://host:port or file:///path");
  }
  std::string scheme = url.substr(0, scheme_end);
  auto [body, query] = split_query(url.substr(scheme_end + 3));
  if (scheme == "env") {
    int rank = pick(options.rank(), query, "rank", "RANK", "rank");
    int world = pick(options.world_size(), query, "world_size", "WORLD_SIZE", "world size");
    std::string addr = env_or("MASTER_ADDR");
    std::string port = env_or("MASTER_PORT");
    if (addr.empty() || port.empty()) {
      modhooks::detail::fail<ValueError>(
          "dist.init.missing_setting",
          "modhooks: env:// needs MASTER_ADDR and MASTER_PORT (torchrun sets them)");
    }
    return {tcp_store(addr, to_int(port, "MASTER_PORT"), rank, world, timeout), rank, world};
  }
  if (scheme == "tcp") {
    int rank = pick(options.rank(), query, "rank", "RANK", "rank");
    int world = pick(options.world_size(), query, "world_size", "WORLD_SIZE", "world size");
    auto colon = body.rfind(':');
    if (colon == std::string::npos) {
      modhooks::detail::fail<ValueError>("dist.init.bad_url",
                                         "modhooks: tcp:// URL needs a port: '" + url + "'");
    }
    std::string host = body.substr(0, colon);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return {tcp_store(host, to_int(body.substr(colon + 1), "port"), rank, world, timeout), rank,
            world};
  }
  if (scheme == "file") {
    int rank = pick(options.rank(), query, "rank", "RANK", "rank");
    int world = pick(options.world_size(), query, "world_size", "WORLD_SIZE", "world size");
    if (body.empty())
      modhooks::detail::fail<ValueError>("dist.init.bad_url",
                                         "modhooks: file:// URL has no path: '" + url + "'");
    auto store = c10::make_intrusive<c10d::FileStore>(body, world);
    store->setTimeout(timeout);
    return {store, rank, world};
  }
  modhooks::detail::fail<RuntimeError>(
      "dist.init.unknown_scheme",
      "modhooks: unknown init_method scheme '" + scheme + "': use env://, tcp:// or file://");
}

}  // namespace

void init_process_group(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  if (default_group_) {
    modhooks::detail::fail<ValueError>("dist.init.already_initialized",
                                       "trying to initialize the default process group twice!");
  }
  const std::string& backend = options.backend();
  if (backend != "gloo" && backend != "nccl") {
    modhooks::detail::fail<ValueError>(
        "dist.init.unknown_backend",
        "modhooks: unknown backend '" + backend + "': use gloo or nccl");
  }
  if (backend == "nccl" && !is_nccl_available()) {
    modhooks::detail::fail<RuntimeError>(
        "dist.init.nccl_unavailable",
        "modhooks: this build of modhooks::dist has no NCCL (its libtorch has none, "
        "or NCCL's headers were missing at build time)");
  }
  auto timeout = options.timeout();
  if (timeout.count() <= 0) {
    timeout = backend == "nccl" ? std::chrono::minutes(10) : std::chrono::minutes(30);
  }
  try {
    Rendezvous rv = rendezvous(options, timeout);
    if (rv.world_size <= 0 || rv.rank < 0 || rv.rank >= rv.world_size) {
      modhooks::detail::fail<ValueError>(
          "dist.init.bad_rank", "modhooks: rank " + std::to_string(rv.rank) +
                                    " is not in a world of size " + std::to_string(rv.world_size));
    }
    // The same store prefixes as Python's init_process_group, so a store shared with other
    // systems (RPC, a second group) keeps its keys apart.
    auto store = c10::make_intrusive<c10d::PrefixStore>("default_pg", rv.store);
    auto group_store = c10::make_intrusive<c10d::PrefixStore>("0/", store);
    auto group = c10::make_intrusive<c10d::ProcessGroup>(group_store, rv.rank, rv.world_size);
    if (backend == "gloo") {
      auto backend_store = c10::make_intrusive<c10d::PrefixStore>("cpu/", group_store);
      auto opts = c10d::ProcessGroupGloo::Options::create_default(timeout);
      auto gloo =
          c10::make_intrusive<c10d::ProcessGroupGloo>(backend_store, rv.rank, rv.world_size, opts);
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    } else {
      auto backend_store = c10::make_intrusive<c10d::PrefixStore>("cuda/", group_store);
      auto nccl = detail::make_nccl_backend(backend_store, rv.rank, rv.world_size, timeout);
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    }
    group->setGroupName("0");
    group->setGroupDesc("default_pg");
    default_group_ = group;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    modhooks::detail::fail<RuntimeError>("dist.init.failed",
                                         "modhooks: init_process_group(" + options.init_method() +
                                             ") failed: " + detail::first_line(e.what()));
  }
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  return static_cast<bool>(default_group_);
}

c10::intrusive_ptr<c10d::ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  if (!default_group_) {
    modhooks::detail::fail<ValueError>("dist.group.not_initialized",
                                       "Default process group has not been initialized, please "
                                       "make sure to call modhooks::dist::init_process_group.");
  }
  return default_group_;
}

int get_rank() { return default_group()->getRank(); }

int get_world_size() { return default_group()->getSize(); }

void barrier() {
  auto group = default_group();
  detail::translate("barrier", [&] { group->barrier()->wait(); });
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  default_group_.reset();
}

}  // namespace dist
MODHOOKS_END_NAMESPACE
