// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Shows that modhooks::dist's DDP overlaps communication with backward: a bucket's all-reduce
// starts while backward has not yet reached the model's first layer. Started under
// `torchrun --no-python` (tests/dist/CMakeLists.txt):
//   ddp_overlap expect_overlap <bucket_cap_mb>      small buckets: the order must show overlap
//   ddp_overlap expect_no_overlap <bucket_cap_mb>   one bucket (negative control): it must not
// Trains a stack of Linear layers on every rank (gloo, CPU) and records, on a monotonic clock,
// when backward() is called, when backward reaches each layer and leaves it (modhooks' full
// backward pre-hooks and hooks), when each bucket's all-reduce starts (a comm hook that records
// the event and then runs comm_hooks::allreduce()'s hook) and completes, and when backward()
// returns. Rank 0 prints the last step's trace. The check is an order, never a duration: the
// first bucket's all-reduce must start before backward reaches fc0, whose gradients are the
// last computed. With a single bucket that cannot happen (the bucket is ready only once fc0's
// gradients exist), which expect_no_overlap checks, so the check is known to be able to fail.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dist = modhooks::dist;

namespace {

constexpr int kLayers = 6;
constexpr int64_t kWidth = 256;
constexpr int64_t kBatch = 64;
/// Buckets are rebuilt by size after the first step (before it, one bucket holds everything, as
/// in Python's DDP), so the checked step must come after it.
constexpr int kSteps = 4;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    for (int i = 0; i < kLayers; ++i)
      fc.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(kWidth, kWidth)));
  }
  at::Tensor forward(at::Tensor x) {
    for (int i = 0; i < kLayers; ++i) {
      x = modhooks::call(fc[i], x);
      if (i + 1 < kLayers) x = torch::relu(x);
    }
    return x;
  }
  std::vector<torch::nn::Linear> fc;
};
TORCH_MODULE(Net);

enum class Kind { kBackwardCalled, kLayerReached, kLayerLeft, kCommStart, kCommDone, kReturned };

struct Event {
  Kind kind;
  int index;  // the layer or the bucket
  std::chrono::steady_clock::time_point time;
  std::string detail;
};

/// Events in the order they were recorded. The autograd engine's thread records all but the
/// all-reduces' completions, which Gloo's worker thread records; the mutex orders them.
class Trace {
 public:
  void record(Kind kind, int index, std::string detail = {}) {
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back({kind, index, now, std::move(detail)});
  }
  std::vector<Event> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(events_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<Event> events_;
};

/// Records when the Reducer hands a bucket over and when its all-reduce completes, and reduces
/// it with the hook comm_hooks::allreduce() makes, so that the reduction is the library's own.
class TracingHook : public c10d::CommHookInterface {
 public:
  TracingHook(std::unique_ptr<c10d::CommHookInterface> inner, std::shared_ptr<Trace> trace,
              std::map<const c10::TensorImpl*, std::string> names)
      : inner_(std::move(inner)), trace_(std::move(trace)), names_(std::move(names)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    const int index = static_cast<int>(bucket.getIndex());
    std::ostringstream what;
    for (const auto& p : bucket.getParameters()) {
      auto name = names_.find(p.unsafeGetTensorImpl());
      what << (name == names_.end() ? "?" : name->second) << " ";
    }
    what << "(" << bucket.getBufferRef().nbytes() / 1024 << " KiB)";
    trace_->record(Kind::kCommStart, index, what.str());
    auto future = inner_->runHook(bucket);
    // Added before the hook returns, so this runs before DDP's own callbacks on the future and
    // thus before the Reducer's wait at the end of backward can return.
    future->addCallback(
        [trace = trace_, index](c10::ivalue::Future&) { trace->record(Kind::kCommDone, index); });
    return future;
  }
  at::Tensor parseHookResult(const c10::IValue& result) override {
    return inner_->parseHookResult(result);
  }

 private:
  std::unique_ptr<c10d::CommHookInterface> inner_;
  std::shared_ptr<Trace> trace_;
  std::map<const c10::TensorImpl*, std::string> names_;
};

/// What one step's trace says, by order of events alone.
struct Verdict {
  int buckets = 0;
  /// The first bucket's all-reduce started before backward reached fc0.
  bool overlapped = false;
};

Verdict judge(const std::vector<Event>& events) {
  std::optional<std::size_t> first_comm, fc0_reached, returned;
  Verdict verdict;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.kind == Kind::kCommStart) {
      ++verdict.buckets;
      if (!first_comm) first_comm = i;
    }
    if (e.kind == Kind::kLayerReached && e.index == 0 && !fc0_reached) fc0_reached = i;
    if (e.kind == Kind::kReturned) returned = i;
  }
  if (!first_comm || !fc0_reached || !returned)
    throw std::runtime_error("the trace lacks an all-reduce, fc0's backward or backward's return");
  if (*first_comm > *returned) throw std::runtime_error("an all-reduce started after backward");
  verdict.overlapped = *first_comm < *fc0_reached;
  return verdict;
}

std::string describe(const Event& e) {
  const std::string layer = "fc" + std::to_string(e.index);
  const std::string bucket = "bucket " + std::to_string(e.index);
  switch (e.kind) {
    case Kind::kBackwardCalled:
      return "loss.backward() called";
    case Kind::kLayerReached:
      return "backward reaches " + layer + " (full backward pre-hook)";
    case Kind::kLayerLeft:
      return "backward leaves " + layer + " (full backward hook)";
    case Kind::kCommStart:
      return bucket + " all-reduce starts: " + e.detail;
    case Kind::kCommDone:
      return bucket + " all-reduce done";
    case Kind::kReturned:
      return "loss.backward() returns";
  }
  return "?";
}

void print(const std::vector<Event>& events) {
  const auto origin = events.front().time;
  for (const Event& e : events) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(e.time - origin).count();
    std::printf("  %8lld us  %s\n", static_cast<long long>(us), describe(e).c_str());
  }
}

/// Trains kSteps steps and returns each step's verdict; rank 0 prints the last step's trace.
std::vector<Verdict> train(double bucket_cap_mb) {
  const int rank = dist::get_rank();
  torch::manual_seed(0);
  Net net;
  auto trace = std::make_shared<Trace>();
  std::vector<modhooks::RemovableHandle> handles;
  std::map<const c10::TensorImpl*, std::string> names;
  for (int i = 0; i < kLayers; ++i) {
    handles.push_back(modhooks::register_full_backward_pre_hook(
        net->fc[i], [trace, i](auto&, const auto&) { trace->record(Kind::kLayerReached, i); }));
    handles.push_back(modhooks::register_full_backward_hook(
        net->fc[i],
        [trace, i](auto&, const auto&, const auto&) { trace->record(Kind::kLayerLeft, i); }));
  }
  for (const auto& item : net->named_parameters())
    names[item.value().unsafeGetTensorImpl()] = item.key();

  dist::DistributedDataParallel ddp(net, dist::DDPOptions().bucket_cap_mb(bucket_cap_mb));
  ddp.register_comm_hook(
      dist::CommHook::from_factory([trace, names](const c10::intrusive_ptr<c10d::ProcessGroup>& g) {
        return std::make_unique<TracingHook>(dist::comm_hooks::allreduce().make(g), trace, names);
      }));
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.01));

  torch::manual_seed(1 + rank);  // each rank its own data
  std::vector<Verdict> verdicts;
  std::vector<Event> events;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor x = torch::randn({kBatch, kWidth}), y = torch::randn({kBatch, kWidth});
    at::Tensor loss = (ddp(x) - y).pow(2).mean();
    trace->take();  // forward records nothing; start clean all the same
    trace->record(Kind::kBackwardCalled, -1);
    loss.backward();
    trace->record(Kind::kReturned, -1);
    opt.step();
    ddp.zero_grad();
    events = trace->take();
    verdicts.push_back(judge(events));
  }
  if (rank == 0) {
    std::printf("rank 0, step %d of %d (bucket_cap_mb %g), times from loss.backward()'s call:\n",
                kSteps, kSteps, bucket_cap_mb);
    print(events);
    std::fflush(stdout);
  }
  return verdicts;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "expect_overlap" && mode != "expect_no_overlap") {
    std::cerr << "usage: ddp_overlap expect_overlap|expect_no_overlap <bucket_cap_mb>\n";
    return 2;
  }
  const double bucket_cap_mb = std::stod(argv[2]);
  // Two ranks share this machine's cores; more intra-op threads would only contend.
  torch::set_num_threads(1);
  dist::init_process_group(
      dist::InitOptions().backend("gloo").timeout(std::chrono::milliseconds(60000)));
  const int rank = dist::get_rank();
  bool ok = true;
  try {
    std::vector<Verdict> verdicts = train(bucket_cap_mb);
    dist::barrier();  // rank 0's trace first
    for (std::size_t step = 0; step < verdicts.size(); ++step) {
      const Verdict& v = verdicts[step];
      std::printf(
          "rank %d step %zu: %d bucket(s); first all-reduce started %s backward reached fc0\n",
          rank, step + 1, v.buckets, v.overlapped ? "BEFORE" : "after");
    }
    const Verdict& last = verdicts.back();
    const bool overlap = mode == "expect_overlap";
    ok = overlap ? last.overlapped && last.buckets >= 3 : !last.overlapped && last.buckets == 1;
    std::printf("rank %d: %s: expected %s\n", rank, ok ? "ok" : "FAILED",
                overlap ? "several buckets, the first all-reduce starting before backward "
                          "reaches fc0"
                        : "one bucket, whose all-reduce cannot start before backward reaches "
                          "fc0 (negative control)");
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::cout << "rank " << rank << ": FAILED: " << e.what() << std::endl;
    std::exit(1);  // another rank may wait in a collective; torchrun stops it
  }
  dist::barrier();
  dist::destroy_process_group();
  return ok ? 0 : 1;
}
