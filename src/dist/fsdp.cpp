// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// fully_shard: Python's FSDP2 (torch/distributed/fsdp/_fully_shard) on modhooks' hooks. One
// `ShardState` per fully_shard call is both Python's FSDPState and its FSDPParamGroup; the
// states under one root share a `Context` (Python's FSDPStateContext).
#include "modhooks/dist/fsdp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dist_detail.h"
#include "fsdp_param.h"
#include "modhooks/dist/process_group.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/register.h"
#include "modhooks/state/module_state.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {
namespace detail {
namespace {

using torch::autograd::variable_list;
namespace ud = nn::utils::detail;
using fsdp::ShardedParam;

[[noreturn]] void fail_fsdp(const char* id, const std::string& text) {
  modhooks::detail::fail<RuntimeError>(id, "modhooks: " + text);
}

/// Python's TrainingState.
enum class Training { kIdle, kForward, kPreBackward, kPostBackward };

/// Frees a tensor's storage, keeping the StorageImpl (and so every tensor autograd saved that
/// shares it): Python's `storage.resize_(0)`.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

/// Gives a freed storage `nbytes` again from its own allocator (its contents are then written).
void allocate_storage(const at::Tensor& t, std::size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

class ShardState;

/// What the states under one root share (Python's FSDPStateContext).
struct Context {
  std::vector<std::weak_ptr<ShardState>> all_states;
  bool callback_queued = false;
  ShardState* iter_forward_root = nullptr;
};

/// The states of fully_shard calls, by module: the parent's call leaves its children's
/// parameters to them, and the root's first forward finds every state below it. The registry
/// owns them (the hooks hold weak references); the states of modules that died go at the next
/// fully_shard.
std::mutex registry_mutex;
std::unordered_map<const torch::nn::Module*, std::shared_ptr<ShardState>> registry;

std::shared_ptr<ShardState> state_of(const torch::nn::Module& module);

/// A hook's value with `f` applied to each tensor in it (Python's `_apply_to_tensors`): tensors
/// in tuples, lists and dicts, depth first, in order.
template <class F>
c10::IValue map_tensors(const c10::IValue& value, F& f) {
  if (value.isTensor()) return f(value.toTensor());
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& v : value.toTupleRef().elements()) items.push_back(map_tensors(v, f));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorList()) list.push_back(f(t));
    return list;
  }
  if (value.isList()) {
    auto list = value.toList().copy();
    for (std::size_t i = 0; i < list.size(); ++i) list.set(i, map_tensors(list.get(i), f));
    return list;
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict().copy();
    for (const auto& item : value.toGenericDict()) {
      dict.insert_or_assign(item.key(), map_tensors(item.value(), f));
    }
    return dict;
  }
  return value;
}

template <class F>
std::vector<c10::IValue> map_tensors(const std::vector<c10::IValue>& values, F&& f) {
  std::vector<c10::IValue> out;
  out.reserve(values.size());
  for (const auto& v : values) out.push_back(map_tensors(v, f));
  return out;
}

/// Python's `collect_grad_tensors`: the tensors that need grad.
std::vector<at::Tensor> grad_tensors(const std::vector<c10::IValue>& values) {
  std::vector<at::Tensor> out;
  map_tensors(values, [&](const at::Tensor& t) {
    if (t.requires_grad()) out.push_back(t);
    return t;
  });
  return out;
}

struct StateCapsule : torch::CustomClassHolder {
  explicit StateCapsule(std::weak_ptr<ShardState> s) : state(std::move(s)) {}
  std::weak_ptr<ShardState> state;
};

/// Python's RegisterPostBackwardFunction: an identity on the module's inputs that need grad,
/// whose backward (after the module's own backward) reduce-scatters the group's gradients.
struct RegisterPostBackward : torch::autograd::Function<RegisterPostBackward> {
  static variable_list forward(torch::autograd::AutogradContext* ctx,
                               c10::intrusive_ptr<StateCapsule> state, at::TensorList inputs);
  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads);
};

class ShardState : public std::enable_shared_from_this<ShardState> {
 public:
  ShardState(std::weak_ptr<torch::nn::Module> module, const FullyShardOptions& options)
      : module_(std::move(module)),
        group_(options.process_group() ? options.process_group() : default_group()),
        rank_(group_->getRank()),
        world_(group_->getSize()),
        mp_(options.mp_policy()),
        auto_reshard_after_forward_(!options.reshard_after_forward().has_value()),
        reshard_after_forward_(options.reshard_after_forward().value_or(true)),
        context_(std::make_shared<Context>()) {}

  /// Takes the parameters of `managed` (the module's subtree but for sharded submodules').
  /// Every check comes before the first parameter changes: a refused call leaves the module
  /// as it was.
  void shard(const std::vector<torch::nn::Module*>& managed) {
    struct Found {
      torch::nn::Module* owner;
      std::string name;
      at::Tensor param;
      ud::Member member;
    };
    std::vector<Found> found;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (torch::nn::Module* m : managed) {
      for (const auto& item : ud::parameters_of(*m)) {
        const at::Tensor& param = item.value();
        if (!param.defined()) continue;
        if (!seen.insert(param.unsafeGetTensorImpl()).second) {
          fail_fsdp("dist.fsdp.shared_parameter",
                    "a parameter registered under two names (" + item.key() +
                        ") cannot be sharded: modhooks' fully_shard shards each parameter of a "
                        "module's own table once");
        }
        if (param.dim() == 0) {
          fail_fsdp("dist.fsdp.scalar_parameter",
                    "parameter '" + item.key() + "' has no dimension to shard along (dim 0)");
        }
        if (compute_dtype(param) != compute_dtype(found.empty() ? param : found.front().param)) {
          fail_fsdp("dist.fsdp.mixed_dtypes",
                    "a group's parameters must share one dtype ('" + item.key() + "' is " +
                        std::string(c10::toString(param.scalar_type())) + ", '" +
                        found.front().name + "' " +
                        c10::toString(found.front().param.scalar_type()) +
                        "); shard the module that holds it in a group of its own first");
        }
        ud::Member member = ud::find_member(*m, item.key());
        if (member && !member.get().is_same(param)) member = ud::Member();
        found.push_back({m, item.key(), param, member});
      }
      managed_.emplace_back(m, ud::parameters_of(*m).size());
    }
    for (const Found& f : found) add_param(*f.owner, f.name, f.param, f.member);
    if (!found.empty()) gather_by_broadcast_ = backend_name(found.front().param.device()) == "gloo";
    reshard();
  }

  /// Whether `module`, alive, is the module this state shards.
  bool shards(const torch::nn::Module& module) const {
    auto m = module_.lock();
    return m && m.get() == &module;
  }
  bool module_alive() const { return !module_.expired(); }

  const std::vector<ShardedParam>& params() const { return params_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }
  void set_reduce_grads(bool value) { reduce_grads_ = value; }

  void zero_grad() {
    for (ShardedParam& p : params_) {
      p.shard.mutable_grad().reset();
      p.unsharded.mutable_grad().reset();
    }
  }

  /// Python's FSDPState._pre_forward with the group's pre_forward.
  std::optional<std::vector<c10::IValue>> pre_forward(const std::vector<c10::IValue>& args) {
    check_unchanged();
    std::optional<std::vector<c10::IValue>> cast = cast_inputs(args);
    if (training_ == Training::kPreBackward) {
      if (!params_.empty() && !unsharded_) unshard();
      return cast;
    }
    const bool first_in_pass = training_ != Training::kForward;
    training_ = Training::kForward;
    if (first_in_pass) root_pre_forward();
    if (params_.empty()) return cast;
    const bool entering = group_training_ != Training::kForward;
    group_training_ = Training::kForward;
    unshard();
    if (!entering || !at::GradMode::is_enabled()) return cast;
    const std::vector<c10::IValue>& current = cast ? *cast : args;
    std::vector<at::Tensor> inputs = grad_tensors(current);
    if (inputs.empty()) return cast;
    variable_list outputs = RegisterPostBackward::apply(
        c10::make_intrusive<StateCapsule>(weak_from_this()), at::TensorList(inputs));
    auto next = outputs.begin();
    return map_tensors(current,
                       [&](const at::Tensor& t) { return t.requires_grad() ? *next++ : t; });
  }

  /// Python's FSDPState._post_forward with the group's post_forward.
  void post_forward(const c10::IValue& output) {
    if (training_ == Training::kPreBackward) return;
    const std::string returned = returned_parameter(output);
    if (!params_.empty()) {
      if (reshard_after_forward_) reshard();
      group_training_ = Training::kIdle;
    }
    if (at::GradMode::is_enabled()) {
      std::weak_ptr<ShardState> weak = weak_from_this();
      for (at::Tensor& t : grad_tensors({output})) {
        t.register_hook([weak](const at::Tensor&) {
          if (auto s = weak.lock()) s->pre_backward();
        });
      }
    }
    training_ = Training::kIdle;
    if (context_->iter_forward_root == this) context_->iter_forward_root = nullptr;
    if (!returned.empty()) {
      fail_fsdp("dist.fsdp.output_is_parameter",
                "the forward of a sharded module returned its whole parameter '" + returned +
                    "' (or a view of it), whose storage fully_shard frees once the group is "
                    "resharded; return a copy (clone()) instead");
    }
  }

  /// Python's FSDPParamGroup.post_backward: the gradients of the whole parameters, averaged
  /// over the ranks by one reduce-scatter, onto the shards.
  void post_backward() {
    group_training_ = Training::kPostBackward;
    if (params_.empty()) return;
    if (!reduce_grads_) {
      reshard();
      return;
    }
    std::vector<ShardedParam*> with_grad;
    std::vector<at::Tensor> grads;
    for (ShardedParam& p : params_) {
      if (!p.unsharded.grad().defined()) continue;
      with_grad.push_back(&p);
      grads.push_back(p.unsharded.grad());
      p.unsharded.mutable_grad().reset();
    }
    reshard();
    if (grads.empty()) return;
    reduce_scatter(with_grad, std::move(grads));
  }

  /// The final callback (Python's _root_post_backward_final_callback).
  void finish_backward() {
    Context& ctx = *context_;
    ctx.iter_forward_root = nullptr;
    for (const auto& weak : ctx.all_states) {
      auto s = weak.lock();
      if (!s) continue;
      if (s->group_training_ != Training::kPostBackward) s->post_backward();
      s->group_training_ = Training::kIdle;
      s->training_ = Training::kIdle;
    }
    ctx.callback_queued = false;
  }

 private:
  /// The dtype forward computes in: `mp_policy`'s `param_dtype` for floating parameters (Python's
  /// init_dtype_attrs), else the parameter's own.
  c10::ScalarType compute_dtype(const at::Tensor& param) const {
    return c10::isFloatingType(param.scalar_type())
               ? mp_.param_dtype().value_or(param.scalar_type())
               : param.scalar_type();
  }

  void add_param(torch::nn::Module& owner, const std::string& name, const at::Tensor& param,
                 const ud::Member& member) {
    ShardedParam p;
    p.owner = &owner;
    p.name = name;
    p.member = member;
    p.unsharded = param;
    p.sizes = param.sizes().vec();
    p.rows = param.size(0);
    p.row_numel = p.rows == 0 ? 0 : param.numel() / p.rows;
    p.chunk_rows = (p.rows + world_ - 1) / world_;  // torch.chunk's size, padded to it
    p.local_rows = std::max<int64_t>(0, std::min(p.chunk_rows, p.rows - rank_ * p.chunk_rows));
    std::vector<int64_t> padded_sizes = p.sizes;
    padded_sizes[0] = p.chunk_rows;
    {
      torch::NoGradGuard no_grad;
      p.padded = at::zeros(padded_sizes, param.options().requires_grad(false));
      if (p.local_rows > 0) {
        p.padded.narrow(0, 0, p.local_rows)
            .copy_(param.detach().narrow(0, rank_ * p.chunk_rows, p.local_rows));
      }
      p.shard = p.padded.narrow(0, 0, p.local_rows);
      p.shard.requires_grad_(param.requires_grad());
      const c10::ScalarType compute = compute_dtype(param);
      p.grad_dtype = mp_.reduce_dtype().value_or(param.scalar_type());
      std::vector<int64_t> gathered_sizes = p.sizes;
      gathered_sizes[0] = p.chunk_rows * world_;
      p.gathered = at::empty(gathered_sizes, param.options().dtype(compute));
      p.unsharded.mutable_grad().reset();
      if (p.grad_dtype != compute && p.unsharded.requires_grad()) {
        p.unsharded.set_grad_dtype(p.grad_dtype);
      }
    }
    params_.push_back(std::move(p));
  }

  /// The name of the group's backend for tensors on `device` ("gloo", "nccl"); empty where the
  /// group has none for it (its collectives then fail and say so).
  std::string backend_name(const at::Device& device) const {
    try {
      return group_->getBackend(device.type())->getBackendName();
    } catch (const c10::Error&) {
      return {};
    }
  }

  /// A module of the group that gained, lost or swapped a parameter after fully_shard.
  void check_unchanged() const {
    std::size_t i = 0;
    for (const auto& [module, count] : managed_) {
      const auto& table = ud::parameters_of(*module);
      bool same = table.size() == count;
      for (const auto& item : table) {
        if (!same) break;
        if (!item.value().defined()) continue;
        while (i < params_.size() && params_[i].owner != module) ++i;
        same = i < params_.size() &&
               shown(params_[i]).unsafeGetTensorImpl() == item.value().unsafeGetTensorImpl();
        ++i;
      }
      if (!same) {
        fail_fsdp("dist.fsdp.module_changed",
                  "a sharded module's parameters changed after fully_shard (one was added, "
                  "removed or replaced); shard the module after it is complete");
      }
    }
  }

  /// Python's _cast_forward_inputs: floating tensors to `mp_policy`'s `param_dtype`.
  std::optional<std::vector<c10::IValue>> cast_inputs(const std::vector<c10::IValue>& args) const {
    if (!mp_.param_dtype()) return std::nullopt;
    const c10::ScalarType dtype = *mp_.param_dtype();
    return map_tensors(
        args, [&](const at::Tensor& t) { return t.is_floating_point() ? t.to(dtype) : t; });
  }

  /// Python's _lazy_init and _root_pre_forward.
  void root_pre_forward() {
    lazy_init();
    if (context_->iter_forward_root != nullptr) return;
    context_->iter_forward_root = this;
  }

  void lazy_init() {
    if (is_root_.has_value()) return;
    auto root = module_.lock();
    if (!root) return;
    is_root_ = true;
    std::vector<std::weak_ptr<ShardState>> states;
    for (const auto& m : root->modules(/*include_self=*/true)) {
      auto s = state_of(*m);
      if (!s) continue;
      if (s.get() != this) {
        if (s->is_root_.has_value()) {
          fail_fsdp("dist.fsdp.root_not_first",
                    "a sharded submodule ran forward before the root module; run forward through "
                    "the root module first");
        }
        s->is_root_ = false;
        s->context_ = context_;
      }
      states.push_back(s);
    }
    context_->all_states = std::move(states);
    if (auto_reshard_after_forward_) reshard_after_forward_ = false;
  }

  void pre_backward() {
    training_ = Training::kPreBackward;
    if (!context_->callback_queued) {
      context_->callback_queued = true;
      std::weak_ptr<ShardState> weak = weak_from_this();
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto s = weak.lock()) s->finish_backward();
      });
    }
    if (params_.empty() || group_training_ == Training::kPreBackward) return;
    group_training_ = Training::kPreBackward;
    unshard();
  }

  /// The group's padded shards from every rank, in each whole parameter: one all-gather of one
  /// flat buffer copied out (Python's), or on Gloo one broadcast per rank and parameter straight
  /// into the parameter's rows. Gloo's all-gather copies through a second flat buffer of its
  /// own, so there the flat all-gather holds two groups' whole size beside the shards, Python's
  /// three; the broadcasts hold none beside the whole parameters and move the same bytes.
  void unshard() {
    if (unsharded_) return;
    torch::NoGradGuard no_grad;
    for (ShardedParam& p : params_) allocate_storage(p.gathered, p.gathered_bytes(world_));
    if (world_ > 1 && gather_by_broadcast_) {
      for (int root = 0; root < world_; ++root) {
        for (ShardedParam& p : params_) {
          if (p.padded_numel() == 0) continue;
          at::Tensor rows = p.gathered.view({world_, p.padded_numel()})[root];
          if (root == rank_) rows.copy_(p.padded.reshape({-1}));
          std::vector<at::Tensor> tensors{rows};
          c10d::BroadcastOptions opts;
          opts.rootRank = root;
          translate("broadcast", [&] { group_->broadcast(tensors, opts)->wait(); });
        }
      }
    } else {
      int64_t part_numel = 0;
      for (const ShardedParam& p : params_) part_numel += p.padded_numel();
      at::Tensor output =
          at::empty({part_numel * world_},
                    params_.front().padded.options().dtype(params_.front().gathered.scalar_type()));
      at::Tensor part = output.narrow(0, part_numel * rank_, part_numel);
      int64_t offset = 0;
      for (const ShardedParam& p : params_) {
        part.narrow(0, offset, p.padded_numel()).copy_(p.padded.reshape({-1}));
        offset += p.padded_numel();
      }
      if (world_ > 1) {
        translate("all_gather", [&] { group_->all_gather_single(output, part)->wait(); });
      }
      at::Tensor rows = output.view({world_, part_numel});
      offset = 0;
      for (ShardedParam& p : params_) {
        p.gathered.view({world_, p.padded_numel()}).copy_(rows.narrow(1, offset, p.padded_numel()));
        offset += p.padded_numel();
      }
      // The finished work may still hold `output` and let go of it later (Gloo's, on its own
      // thread): freed here, a group's flat buffer never outlives its gather.
      free_storage(output);
    }
    unsharded_ = true;
    for (ShardedParam& p : params_) {
      // Python's set_requires_grad_if_needed: a shard frozen by the user freezes the whole.
      if (p.unsharded.requires_grad() != p.shard.requires_grad()) {
        p.unsharded.requires_grad_(p.shard.requires_grad());
      }
      p.unsharded.set_data(p.gathered.narrow(0, 0, p.rows));
    }
    show_all();
  }

  void reshard() {
    torch::NoGradGuard no_grad;
    unsharded_ = false;
    for (ShardedParam& p : params_) {
      free_storage(p.gathered);
      p.unsharded.set_data(p.shard);
    }
    show_all();
  }

  /// The name of a whole parameter of the group that `output` holds or views; empty if none.
  std::string returned_parameter(const c10::IValue& output) const {
    std::string found;
    if (!unsharded_) return found;
    map_tensors(std::vector<c10::IValue>{output}, [&](const at::Tensor& t) {
      if (!found.empty() || !t.defined() || !t.has_storage()) return t;
      for (const ShardedParam& p : params_) {
        if (t.storage().unsafeGetStorageImpl() == p.gathered.storage().unsafeGetStorageImpl()) {
          found = p.name;
          break;
        }
      }
      return t;
    });
    return found;
  }

  /// The tensor the module shows for `p`: the whole parameter while gathered, else the shard.
  const at::Tensor& shown(const ShardedParam& p) const {
    return unsharded_ ? p.unsharded : p.shard;
  }

  /// Puts each `shown(p)` in the module's parameter table and its member (Python's
  /// `_setattr_on_modules`), so forward reads the whole parameters and everything else the
  /// shards; not into a module that died before a backward's final callback reshards it.
  void show_all() const {
    const std::shared_ptr<torch::nn::Module> alive = module_.lock();
    if (!alive) return;
    for (const ShardedParam& p : params_) {
      const at::Tensor& value = shown(p);
      ud::parameters_of(*p.owner)[p.name] = value;
      if (p.member) p.member.get() = value;
    }
  }

  /// Python's foreach_reduce: the gradients laid out as `(world, -1)` (each padded to
  /// `chunk_rows * world` rows, rank r's rows in row r), one reduce-scatter, and each rank's
  /// part added to (or set as) its shards' gradients.
  void reduce_scatter(const std::vector<ShardedParam*>& params, std::vector<at::Tensor> grads) {
    torch::NoGradGuard no_grad;
    c10::ScalarType reduce_dtype = grads.front().scalar_type();
    for (const at::Tensor& g : grads)
      reduce_dtype = c10::promoteTypes(reduce_dtype, g.scalar_type());
    if (mp_.reduce_dtype()) reduce_dtype = *mp_.reduce_dtype();
    int64_t output_numel = 0;
    for (const ShardedParam* p : params) output_numel += p->padded_numel();
    at::Tensor input =
        at::empty({output_numel * world_}, grads.front().options().dtype(reduce_dtype));
    at::Tensor rows = input.view({world_, output_numel});
    int64_t offset = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ShardedParam& p = *params[i];
      at::Tensor grad = grads[i].to(reduce_dtype).reshape({p.rows, p.row_numel});
      at::Tensor dst =
          rows.narrow(1, offset, p.padded_numel()).view({world_, p.chunk_rows, p.row_numel});
      if (p.rows == p.chunk_rows * world_) {
        dst.copy_(grad.view({world_, p.chunk_rows, p.row_numel}));
      } else {
        at::Tensor padded = at::zeros({p.chunk_rows * world_, p.row_numel}, grad.options());
        padded.narrow(0, 0, p.rows).copy_(grad);
        dst.copy_(padded.view({world_, p.chunk_rows, p.row_numel}));
      }
      offset += p.padded_numel();
    }
    grads.clear();
    // Python's _get_gradient_divide_factors: fp32 and bf16 reduce with AVG; other dtypes (fp16)
    // divide before and after a SUM to stay in range.
    const bool overflow_risk = reduce_dtype != at::kFloat && reduce_dtype != at::kBFloat16;
    double pre = 1, post = 1;
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::AVG;
    if (world_ == 1 || overflow_risk) opts.reduceOp = c10d::ReduceOp::SUM;
    if (overflow_risk && world_ > 1) {
      const auto factor = static_cast<double>(world_);
      double p2 = 1;
      while (std::fmod(factor, p2) == 0 && factor / p2 > p2) p2 *= 2;
      pre = p2;
      post = factor / p2;
    }
    at::Tensor output = at::empty({output_numel}, input.options());
    if (pre != 1) input.div_(pre);
    if (world_ > 1) {
      translate("reduce_scatter",
                [&] { group_->reduce_scatter_single(output, input, opts)->wait(); });
    } else {
      output.copy_(input);
    }
    if (post != 1) output.div_(post);
    free_storage(input);  // as `output` in unshard: gloo's work may keep it a while longer
    offset = 0;
    for (ShardedParam* p : params) {
      at::Tensor part = output;
      if (p->shard.scalar_type() != reduce_dtype) part = output.to(p->shard.scalar_type());
      std::vector<int64_t> sizes = p->sizes;
      sizes[0] = p->local_rows;
      // Over the output's storage but not a view of it, so that an optimizer's zero_grad can
      // detach it in place (libtorch's Optimizer::zero_grad refuses views).
      at::Tensor grad = at::empty({0}, part.options())
                            .set_(part.storage(), part.storage_offset() + offset, sizes,
                                  c10::contiguous_strides(sizes));
      if (p->shard.grad().defined()) {
        p->shard.mutable_grad().add_(grad);
      } else {
        p->shard.mutable_grad() = grad;
      }
      offset += p->padded_numel();
    }
  }

  std::weak_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_, world_;
  MixedPrecisionPolicy mp_;
  bool auto_reshard_after_forward_;
  bool reshard_after_forward_;
  std::shared_ptr<Context> context_;
  std::vector<ShardedParam> params_;
  std::vector<std::pair<torch::nn::Module*, std::size_t>> managed_;
  std::optional<bool> is_root_;
  Training training_ = Training::kIdle;
  Training group_training_ = Training::kIdle;
  bool unsharded_ = true;  // until shard() frees the whole parameters
  bool reduce_grads_ = true;
  bool gather_by_broadcast_ = false;
};

variable_list RegisterPostBackward::forward(torch::autograd::AutogradContext* ctx,
                                            c10::intrusive_ptr<StateCapsule> state,
                                            at::TensorList inputs) {
  ctx->saved_data["fsdp"] = c10::IValue::make_capsule(std::move(state));
  return variable_list(inputs.begin(), inputs.end());
}

variable_list RegisterPostBackward::backward(torch::autograd::AutogradContext* ctx,
                                             variable_list grads) {
  auto holder = ctx->saved_data["fsdp"].toCapsule();
  if (auto s = static_cast<StateCapsule*>(holder.get())->state.lock()) s->post_backward();
  variable_list out;
  out.reserve(grads.size() + 1);
  out.emplace_back();  // the state argument
  for (auto& g : grads) out.push_back(std::move(g));
  return out;
}

std::shared_ptr<ShardState> state_of(const torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry.find(&module);
  return it != registry.end() && it->second->shards(module) ? it->second : nullptr;
}

/// The states under `module` (itself included), each once.
std::vector<std::shared_ptr<ShardState>> states_under(torch::nn::Module& module, bool recurse) {
  std::vector<std::shared_ptr<ShardState>> out;
  if (!recurse) {
    if (auto s = state_of(module)) out.push_back(std::move(s));
    return out;
  }
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (auto s = state_of(*m)) out.push_back(std::move(s));
  }
  return out;
}

std::shared_ptr<torch::nn::Module> owner_of(torch::nn::Module& module) {
  try {
    return module.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    fail_fsdp("dist.fsdp.not_shared",
              "fully_shard needs a module owned by a std::shared_ptr (a holder such as "
              "torch::nn::Linear, or std::make_shared), not one on the stack");
  }
}

}  // namespace

void fully_shard(torch::nn::Module& module, const FullyShardOptions& options) {
  std::shared_ptr<torch::nn::Module> owner = owner_of(module);
  if (state_of(module)) {
    fail_fsdp("dist.fsdp.twice", "fully_shard was already called on this module");
  }
  // Python's _get_managed_modules: the subtree, but not below a module sharded already.
  std::vector<torch::nn::Module*> managed;
  std::vector<torch::nn::Module*> stack{&module};
  while (!stack.empty()) {
    torch::nn::Module* m = stack.back();
    stack.pop_back();
    if (m != &module && state_of(*m)) continue;
    if (std::find(managed.begin(), managed.end(), m) != managed.end()) continue;
    managed.push_back(m);
    auto children = m->children();
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(it->get());
  }
  auto state = std::make_shared<ShardState>(owner, options);
  {
    std::vector<at::Tensor> params;
    for (torch::nn::Module* m : managed) {
      for (const auto& item : ud::parameters_of(*m)) {
        if (item.value().defined()) params.push_back(item.value());
      }
    }
    verify_same_model(state->group(), params, "dist.fsdp.model_mismatch", "fully_shard",
                      "parameters");
  }
  state->shard(managed);
  std::weak_ptr<ShardState> weak = state;
  modhooks::register_forward_pre_hook(
      module,
      [weak](torch::nn::Module&,
             const std::vector<c10::IValue>& args) -> std::optional<std::vector<c10::IValue>> {
        auto s = weak.lock();
        return s ? s->pre_forward(args) : std::nullopt;
      },
      ForwardHookOptions().prepend(true));
  modhooks::register_forward_hook(
      module,
      [weak](torch::nn::Module&, const std::vector<c10::IValue>&, const c10::IValue& output) {
        if (auto s = weak.lock()) s->post_forward(output);
      },
      ForwardHookOptions().always_call(true));
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto it = registry.begin(); it != registry.end();) {
    it = it->second->module_alive() ? std::next(it) : registry.erase(it);
  }
  registry[&module] = std::move(state);
}

void set_requires_gradient_sync(torch::nn::Module& module, bool requires_gradient_sync,
                                bool recurse) {
  for (const auto& s : states_under(module, recurse)) s->set_reduce_grads(requires_gradient_sync);
}

void zero_grad(torch::nn::Module& module) {
  for (const auto& s : states_under(module, true)) s->zero_grad();
}

std::vector<fsdp::ShardGroup> fsdp::shard_groups_under(torch::nn::Module& module) {
  std::vector<ShardGroup> groups;
  for (const auto& s : states_under(module, true)) {
    groups.push_back({s->rank(), s->world(), s->group(), &s->params()});
  }
  return groups;
}

}  // namespace detail
}  // namespace dist
MODHOOKS_END_NAMESPACE
