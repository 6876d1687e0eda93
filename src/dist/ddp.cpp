// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// DistributedDataParallel: c10d's Reducer driven the way torch/nn/parallel/distributed.py drives
// it (construction, _pre_forward, _post_forward, _DDPSink, _sync_buffers, no_sync).
#include "modhooks/dist/ddp.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/nn/modules/embedding.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <cstdint>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "dist_detail.h"
#include "modhooks/dist/process_group.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace detail {
namespace {

constexpr double kDefaultBucketCapMb = 25;  // Python's _DEFAULT_BUCKET_CAP_MB
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kDefaultFirstBucketBytes = kMiB;     // dist._DEFAULT_FIRST_BUCKET_BYTES
constexpr int64_t kBroadcastBucketBytes = 250 * kMiB;  // DDP's broadcast_bucket_size

/// The Reducer's messages speak of Python's keywords; ours name the C++ options and keep
/// libtorch's text (which parameters, which ranks) after them.
[[noreturn]] void reducer_failed(const char* when, const std::exception& e) {
  std::string text = first_line(e.what());
  if (text.find("Expected to have finished reduction in the prior iteration") !=
      std::string::npos) {
    modhooks::detail::fail<RuntimeError>(
        "dist.reducer.unused_parameters",
        "modhooks: the previous step did not reduce every gradient: "
        "the model has parameters that took no part in producing its loss. Construct "
        "DistributedDataParallel with DDPOptions().find_unused_parameters(true) (or "
        ".static_graph(true) when the set of unused parameters stays the same every step), or "
        "make every output of forward part of the loss. libtorch's Reducer says: " +
            text);
  }
  modhooks::detail::fail<RuntimeError>(
      "dist.reducer.failed",
      std::string("modhooks: libtorch's Reducer failed (") + when + "): " + text);
}

template <class F>
auto reducer_call(const char* when, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    reducer_failed(when, e);
  }
}

bool expects_sparse_gradient(const torch::nn::Module& module) {
  if (auto* embedding = dynamic_cast<const torch::nn::EmbeddingImpl*>(&module)) {
    return embedding->options.sparse();
  }
  if (auto* bag = dynamic_cast<const torch::nn::EmbeddingBagImpl*>(&module)) {
    return bag->options.sparse();
  }
  return false;
}

/// FNV-1a over the parameters' shapes and dtypes: what verify_params_across_processes compares.
int64_t model_signature(const std::vector<at::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& p : params) {
    mix(p.dim());
    for (auto s : p.sizes()) mix(s);
    for (auto s : p.strides()) mix(s);
    mix(static_cast<int64_t>(p.scalar_type()));
    mix(static_cast<int64_t>(p.layout()));
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

}  // namespace

void verify_same_model(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                       const std::vector<at::Tensor>& params, const char* error_id, const char* who,
                       const char* what) {
  // The models must agree before any collective whose sizes depend on them: every rank learns
  // every rank's parameter count and signature (a fixed-size allgather, which cannot hang on a
  // size mismatch) and all raise the same error.
  const int rank = group->getRank(), world = group->getSize();
  // On the parameters' device: a NCCL group has no CPU backend.
  at::Tensor mine =
      torch::tensor({static_cast<int64_t>(params.size()), model_signature(params)}, torch::kInt64)
          .to(params.empty() ? at::Device(at::kCPU) : params.front().device());
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < world; ++r) all[0].push_back(torch::empty_like(mine));
  std::vector<at::Tensor> input{mine};
  translate("verify_params", [&] { group->allgather(all, input)->wait(); });
  std::ostringstream differ;
  for (int r = 1; r < world; ++r) {
    if (!all[0][r].equal(all[0][0])) {
      const int64_t theirs = all[0][r][0].item<int64_t>(), first = all[0][0][0].item<int64_t>();
      differ << " rank " << r << " has " << theirs << " " << what << ", rank 0 has " << first
             << (theirs == first ? " (their shapes, strides or dtypes differ);" : ";");
    }
  }
  if (!differ.str().empty()) {
    modhooks::detail::fail<RuntimeError>(
        error_id, std::string("modhooks: ") + who + " needs the same model on every rank:" +
                      differ.str() + " (this is rank " + std::to_string(rank) + ")");
  }
}

struct DDPState {
  DDPOptions options;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<c10d::Reducer> reducer;
  bool require_backward_grad_sync = true;
  bool require_forward_param_sync = true;
  bool static_graph = false;
  bool delay_all_reduce_enqueued = false;
  /// A comm hook is in place: the user's, or modhooks' default one (`default_hook`).
  bool hook_registered = false;
  bool default_hook = false;

  std::vector<at::Tensor> buffers() const {
    std::vector<at::Tensor> out;
    for (const auto& item : module->named_buffers()) out.push_back(item.value().detach());
    return out;
  }

  /// Python's _sync_buffers: rank 0's buffers to everyone, before forward.
  void sync_buffers() {
    auto tensors = buffers();
    if (tensors.empty()) return;
    torch::NoGradGuard no_grad;
    translate("broadcast_buffers",
              [&] { c10d::broadcast_coalesced(group, tensors, kBroadcastBucketBytes, 0); });
  }
};

/// Python's _DDPSink: an identity (cloning) node on the outputs whose backward, in static_graph's
/// first step, queues the Reducer's delay_all_reduce on the engine. Without it the first step of
/// a static graph is not reduced at all.
struct SinkState : torch::CustomClassHolder {
  explicit SinkState(std::weak_ptr<DDPState> s) : state(std::move(s)) {}
  std::weak_ptr<DDPState> state;
};

struct DDPSink : torch::autograd::Function<DDPSink> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<SinkState> state,
                                                at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["ddp"] = c10::IValue::make_capsule(std::move(state));
    torch::autograd::variable_list out;
    out.reserve(inputs.size());
    for (const auto& input : inputs) out.push_back(input.clone());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = ctx->saved_data["ddp"].toCapsule();
    auto state = static_cast<SinkState*>(holder.get())->state.lock();
    if (state && state->static_graph && !state->delay_all_reduce_enqueued) {
      c10d::Reducer* reducer = state->reducer.get();
      torch::autograd::Engine::get_default_engine().queue_callback(
          [reducer] { reducer->delay_all_reduce(); });
      state->delay_all_reduce_enqueued = true;
    }
    torch::autograd::variable_list out;
    out.reserve(grads.size() + 1);
    out.emplace_back();  // the state argument
    for (auto& g : grads) out.push_back(std::move(g));
    return out;
  }
};

/// A hook given as a function.
class FunctionCommHook : public c10d::CommHookInterface {
 public:
  explicit FunctionCommHook(CommHook::Function f) : f_(std::move(f)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    return f_(bucket);
  }
  at::Tensor parseHookResult(const c10::IValue& result) override {
    if (result.isTensor()) return result.toTensor();
    if (result.isTensorList()) return result.toTensorVector().at(0);
    if (result.isList()) return result.toList().get(0).toTensor();
    modhooks::detail::fail<TypeError>(
        "dist.comm_hook.bad_result",
        "modhooks: a comm hook's future must hold a tensor or a list of "
        "tensors, not " +
            result.tagKind());
  }

 private:
  CommHook::Function f_;
};

/// Python's fp16_compress_hook and bf16_compress_hook, op for op: the bucket cast to `dtype`,
/// divided by the world size, all-reduced by sum and copied back.
class CompressHook : public c10d::CommHookInterface {
 public:
  CompressHook(c10::intrusive_ptr<c10d::ProcessGroup> group, at::ScalarType dtype)
      : group_(std::move(group)), dtype_(dtype) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    at::Tensor compressed = bucket.getBufferRef().to(dtype_).div_(group_->getSize());
    std::vector<at::Tensor> tensors{compressed};
    auto future = group_->allreduce(tensors)->getFuture();
    at::Tensor decompressed = bucket.getBufferRef();
    return future->then(
        [decompressed](c10::ivalue::Future& done) {
          decompressed.copy_(done.value().toTensorVector().at(0));
          return c10::IValue(decompressed);
        },
        c10::TensorType::get());
  }
  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  at::ScalarType dtype_;
};

/// Python's allreduce_hook, op for op: the bucket divided by the world size, all-reduced by sum.
class AllReduceHook : public c10d::CommHookInterface {
 public:
  explicit AllReduceHook(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(std::move(group)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(group_->getSize())};
    return group_->allreduce(tensors)->getFuture();
  }
  at::Tensor parseHookResult(const c10::IValue& result) override {
    return result.isTensor() ? result.toTensor() : result.toTensorVector().at(0);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

/// Why a bucket's reduction failed, as a modhooks::Error. The Reducer waits on the bucket's
/// future at the end of backward and the autograd engine rethrows what it holds unchanged, so
/// this is what `loss.backward()` raises.
std::exception_ptr backward_error(const std::string& cause) {
  return std::make_exception_ptr(RuntimeError(
      "dist.backward.reduction_failed",
      "modhooks: a gradient bucket's reduction failed during backward: " + first_line(cause) +
          " (another rank has probably died or stopped: see its log; a rank that merely waits "
          "fails after InitOptions().timeout)"));
}

/// A comm hook whose future fails with modhooks::Error where the hook's own fails with what the
/// backend raised (gloo::IoException, c10::DistBackendError).
class TranslatingCommHook : public c10d::CommHookInterface {
 public:
  explicit TranslatingCommHook(std::unique_ptr<c10d::CommHookInterface> inner)
      : inner_(std::move(inner)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = inner_->runHook(bucket);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::rethrow_exception(backward_error(e.what()));
    }
    // The collective's devices: c10's Future records (CUDA) events, which the Reducer waits on
    // before it copies the bucket into `.grad`, only for the devices it is given.
    auto translated =
        c10::make_intrusive<c10::ivalue::Future>(future->elementType(), future->devices());
    future->addCallback([translated](c10::ivalue::Future& done) {
      if (done.hasError()) {
        translated->setError(backward_error(done.tryRetrieveErrorMessage()));
      } else {
        translated->markCompleted(done.value());
      }
    });
    return translated;
  }
  at::Tensor parseHookResult(const c10::IValue& result) override {
    return inner_->parseHookResult(result);
  }

 private:
  std::unique_ptr<c10d::CommHookInterface> inner_;
};

/// The Reducer's own reduction when no hook is registered, as a hook, so that its failures can
/// be translated: the bucket multiplied by 1 / world size (the Reducer multiplies each gradient
/// by that as it copies it into the bucket: the same products, so results stay bitwise equal)
/// and all-reduced by sum. Not used with gradient_as_bucket_view (see pre_forward).
class MeanAllReduceHook : public c10d::CommHookInterface {
 public:
  explicit MeanAllReduceHook(c10::intrusive_ptr<c10d::ProcessGroup> group)
      : group_(std::move(group)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    at::Tensor buffer = bucket.getBufferRef();
    buffer.mul_(1.0 / group_->getSize());
    std::vector<at::Tensor> tensors{buffer};
    return group_->allreduce(tensors)->getFuture();
  }
  at::Tensor parseHookResult(const c10::IValue& result) override {
    return result.isTensor() ? result.toTensor() : result.toTensorVector().at(0);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace detail

// --- CommHook -----------------------------------------------------------------------------------

CommHook::CommHook(Function function) {
  if (!function)
    modhooks::detail::fail<ValueError>("dist.comm_hook.empty_function",
                                       "modhooks: empty comm hook function");
  factory_ = [f = std::move(function)](const c10::intrusive_ptr<c10d::ProcessGroup>&) {
    return std::make_unique<detail::FunctionCommHook>(f);
  };
}

CommHook CommHook::builtin(Builtin type) {
  CommHook hook;
  hook.builtin_ = type;
  return hook;
}

CommHook CommHook::from_factory(Factory factory) {
  CommHook hook;
  hook.factory_ = std::move(factory);
  return hook;
}

namespace comm_hooks {
// C++ hooks rather than c10d's built-in ones, which the Reducer runs itself: the futures of
// these are watched, so a failed reduction raises modhooks::Error (register_comm_hook).
CommHook allreduce() {
  return CommHook::from_factory([](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
    return std::make_unique<detail::AllReduceHook>(group);
  });
}
CommHook fp16_compress() {
  return CommHook::from_factory([](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
    return std::make_unique<detail::CompressHook>(group, at::kHalf);
  });
}
CommHook bf16_compress() {
  return CommHook::from_factory([](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
    return std::make_unique<detail::CompressHook>(group, at::kBFloat16);
  });
}
}  // namespace comm_hooks

// --- DistributedDataParallelBase ----------------------------------------------------------------

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module,
                                                         DDPOptions options)
    : torch::nn::Module("DistributedDataParallel"), state_(std::make_shared<detail::DDPState>()) {
  auto& s = *state_;
  s.options = std::move(options);
  s.group = s.options.process_group() ? s.options.process_group() : default_group();
  s.module = std::move(module);
  register_module("module", s.module);

  // Python's _build_params_for_reducer: parameters that require grad, module by module, each
  // once; which of them expect sparse gradients; their names for the Reducer's messages.
  std::vector<at::Tensor> params;
  std::vector<bool> expect_sparse;
  std::unordered_map<size_t, std::string> names;
  std::unordered_set<const void*> seen;
  for (const auto& item : s.module->named_modules()) {
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      if (!p.value().requires_grad()) continue;
      if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
      names[params.size()] = item.key().empty() ? p.key() : item.key() + "." + p.key();
      params.push_back(p.value());
      expect_sparse.push_back(detail::expects_sparse_gradient(*item.value()));
    }
  }

  detail::verify_same_model(s.group, params, "dist.ddp.model_mismatch", "DistributedDataParallel",
                            "parameters that require grad");
  detail::translate("verify_params",
                    [&] { c10d::verify_params_across_processes(s.group, params, std::nullopt); });

  // Python's _sync_module_states: rank 0's parameters (and buffers, with broadcast_buffers).
  {
    std::vector<at::Tensor> states;
    for (const auto& p : s.module->named_parameters()) states.push_back(p.value().detach());
    if (s.options.broadcast_buffers()) {
      for (const auto& b : s.module->named_buffers()) states.push_back(b.value().detach());
    }
    if (!states.empty()) {
      torch::NoGradGuard no_grad;
      detail::translate("broadcast_parameters", [&] {
        c10d::broadcast_coalesced(s.group, states, detail::kBroadcastBucketBytes, 0);
      });
    }
  }

  // Python's _BucketCapacityConfig and compute_bucket_size_limits.
  const bool custom_cap = s.options.bucket_cap_mb().has_value();
  const double cap_mb = custom_cap ? *s.options.bucket_cap_mb() : detail::kDefaultBucketCapMb;
  const auto bucket_bytes_cap = static_cast<int64_t>(cap_mb * static_cast<double>(detail::kMiB));
  const int64_t first_bucket_bytes_cap =
      custom_cap ? bucket_bytes_cap : detail::kDefaultFirstBucketBytes;
  std::vector<size_t> limits;
  if (s.options.static_graph() || !s.options.find_unused_parameters()) {
    limits = {static_cast<size_t>(std::numeric_limits<int64_t>::max())};
  } else if (first_bucket_bytes_cap < bucket_bytes_cap) {
    limits = {static_cast<size_t>(first_bucket_bytes_cap), static_cast<size_t>(bucket_bytes_cap)};
  } else {
    limits = {static_cast<size_t>(bucket_bytes_cap)};
  }
  detail::reducer_call("construct", [&] {
    auto assignment = c10d::compute_bucket_assignment_by_size(params, limits, expect_sparse);
    auto buckets = std::get<0>(assignment);
    std::reverse(buckets.begin(), buckets.end());
    s.reducer = std::make_unique<c10d::Reducer>(
        params, std::move(buckets), s.group, expect_sparse, bucket_bytes_cap,
        s.options.find_unused_parameters(), s.options.gradient_as_bucket_view(), names,
        first_bucket_bytes_cap, /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
    if (s.options.static_graph()) {
      s.static_graph = true;
      s.reducer->set_static_graph();
    }
  });
}

DistributedDataParallelBase::~DistributedDataParallelBase() = default;

void DistributedDataParallelBase::pre_forward() {
  auto& s = *state_;
  if (!s.hook_registered && !s.options.gradient_as_bucket_view()) {
    // Registered at the first forward, not at construction: the Reducer takes one hook only,
    // and a user's register_comm_hook may come until then. Not with gradient_as_bucket_view:
    // there the Reducer divides a gradient that already is its bucket view and multiplies by
    // the inverse one it copies, which no hook over the whole bucket can repeat bit for bit.
    detail::reducer_call("comm_hook", [&] {
      s.reducer->register_comm_hook(std::make_unique<detail::TranslatingCommHook>(
          std::make_unique<detail::MeanAllReduceHook>(s.group)));
    });
    s.hook_registered = true;
    s.default_hook = true;
  }
  const bool grad = at::GradMode::is_enabled();
  if (grad && s.require_backward_grad_sync) {
    detail::reducer_call("forward", [&] { s.reducer->prepare_for_forward(); });
  }
  if (grad) detail::reducer_call("forward", [&] { s.reducer->rebuild_buckets(); });
  if (s.require_forward_param_sync && s.options.broadcast_buffers()) s.sync_buffers();
}

bool DistributedDataParallelBase::post_forward(std::vector<at::Tensor>& outputs) {
  auto& s = *state_;
  const bool find_unused = s.options.find_unused_parameters() && !s.static_graph;
  if (at::GradMode::is_enabled() && s.require_backward_grad_sync) {
    s.require_forward_param_sync = true;
    detail::reducer_call("forward", [&] {
      s.reducer->prepare_for_backward(find_unused ? outputs : std::vector<at::Tensor>{});
    });
  } else {
    s.require_forward_param_sync = false;
  }
  if (!(find_unused || (s.static_graph && !s.delay_all_reduce_enqueued)) || outputs.empty()) {
    return false;
  }
  auto passthrough = detail::DDPSink::apply(c10::make_intrusive<detail::SinkState>(state_),
                                            at::TensorList(outputs));
  bool replaced = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    // Tensors outside autograd stay as they are (pytorch/pytorch#60733).
    if (outputs[i].defined() && outputs[i].grad_fn()) {
      outputs[i] = passthrough[i];
      replaced = true;
    }
  }
  return replaced;
}

DistributedDataParallelBase::NoSyncGuard::NoSyncGuard(DistributedDataParallelBase& ddp)
    : ddp_(&ddp), previous_(ddp.state_->require_backward_grad_sync) {
  ddp.state_->require_backward_grad_sync = false;
}

DistributedDataParallelBase::NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : ddp_(other.ddp_), previous_(other.previous_) {
  other.ddp_ = nullptr;
}

DistributedDataParallelBase::NoSyncGuard::~NoSyncGuard() {
  if (ddp_) ddp_->state_->require_backward_grad_sync = previous_;
}

void DistributedDataParallelBase::register_comm_hook(const CommHook& hook) {
  auto& s = *state_;
  if (!hook.is_builtin()) {
    register_comm_hook(hook.make(s.group));
    return;
  }
  check_hook_registration();
  auto type = hook.builtin_type() == CommHook::Builtin::kFp16Compress
                  ? c10d::BuiltinCommHookType::FP16_COMPRESS
                  : c10d::BuiltinCommHookType::ALLREDUCE;
  detail::reducer_call("comm_hook", [&] { s.reducer->register_builtin_comm_hook(type); });
  s.hook_registered = true;
}

void DistributedDataParallelBase::register_comm_hook(
    std::unique_ptr<c10d::CommHookInterface> hook) {
  auto& s = *state_;
  check_hook_registration();
  detail::reducer_call("comm_hook", [&] {
    s.reducer->register_comm_hook(std::make_unique<detail::TranslatingCommHook>(std::move(hook)));
  });
  s.hook_registered = true;
}

void DistributedDataParallelBase::check_hook_registration() const {
  const auto& s = *state_;
  if (s.default_hook) {
    modhooks::detail::fail<RuntimeError>(
        "dist.comm_hook.registered_too_late",
        "modhooks: register_comm_hook must come before the first forward of "
        "the DistributedDataParallel object (its default reduction is in place from then on)");
  }
  if (s.hook_registered) {
    modhooks::detail::fail<RuntimeError>("dist.comm_hook.registered_twice",
                                         "modhooks: register_comm_hook may be called once per "
                                         "DistributedDataParallel object");
  }
}

void DistributedDataParallelBase::zero_grad(bool set_to_none) {
  for (auto& p : state_->module->parameters()) {
    at::Tensor& grad = p.mutable_grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      grad.reset();
      continue;
    }
    // Python's Optimizer.zero_grad(set_to_none=False): no detach_ of a bucket view (libtorch's
    // Optimizer::zero_grad throws "Can't detach views in-place" there); zeroed in place.
    if (grad.grad_fn()) {
      grad = grad.detach();
    } else {
      grad.requires_grad_(false);
    }
    grad.zero_();
  }
}

const c10::intrusive_ptr<c10d::ProcessGroup>& DistributedDataParallelBase::process_group() const {
  return state_->group;
}

const DDPOptions& DistributedDataParallelBase::options() const { return state_->options; }

void consume_prefix_in_state_dict_if_present(StateDict& state_dict, const std::string& prefix) {
  auto starts = [&](const std::string& key) { return key.compare(0, prefix.size(), prefix) == 0; };
  for (const auto& key : state_dict.keys()) {
    if (!starts(key)) continue;
    at::Tensor value = state_dict.at(key);
    state_dict.erase(key);
    state_dict.insert_or_assign(key.substr(prefix.size()), std::move(value));
  }
  auto& metadata = state_dict.metadata();
  std::string bare = prefix;
  bare.erase(std::remove(bare.begin(), bare.end(), '.'), bare.end());
  for (const auto& key : metadata.keys()) {
    if (key.empty()) continue;
    if (key != bare && !starts(key)) continue;
    auto value = metadata.at(key);
    metadata.erase(key);
    metadata.insert_or_assign(key.size() > prefix.size() ? key.substr(prefix.size()) : "",
                              std::move(value));
  }
}

}  // namespace dist
MODHOOKS_END_NAMESPACE
