// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <array>
#include <cstddef>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modhooks/dist/comm_hooks.h"
#include "modhooks/nn/call.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace dist {

/// \addtogroup api_dist
/// @{

/// Python's `DistributedDataParallel` keywords; options left unset behave as Python's defaults.
/// Each is a `TORCH_ARG`: `options.static_graph(true)` sets it and returns the options,
/// `options.static_graph()` reads it.
///
/// **Example**:
/// \code
///   auto options = modhooks::dist::DDPOptions().bucket_cap_mb(25).find_unused_parameters(true);
/// \endcode
struct DDPOptions {
  /// Bucket size in MiB. Unset: 25 MiB, with Python's 1 MiB first bucket after the rebuild; set
  /// (even to 25): every bucket, the first included, holds up to this much, as in Python.
  TORCH_ARG(std::optional<double>, bucket_cap_mb) = std::nullopt;
  /// Traverse the autograd graph from the outputs each step to mark parameters that took no part
  /// (they are then reduced as zeros and their `.grad` left alone).
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// The set of used parameters and the graph stay the same each step: the first step's
  /// all-reduce is delayed to its end, later steps run from a fixed bucket order.
  TORCH_ARG(bool, static_graph) = false;
  /// Parameters' `.grad` become views into the Reducer's buckets (saves a copy and memory);
  /// clear them with `zero_grad()` of the DDP object, not the optimizer's.
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  /// Broadcast buffers (BatchNorm's running stats) from rank 0 at the start of each forward.
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// The group to reduce over; null: the default group of `init_process_group`.
  TORCH_ARG(c10::intrusive_ptr<c10d::ProcessGroup>, process_group) = {};
};

/// @}

namespace detail {

struct DDPState;

/// Whether a leaf of an output obviously holds no tensor: numbers, enums (`c10::ScalarType`),
/// strings, `c10::Scalar`, `c10::Device`.
template <class T>
inline constexpr bool kHoldsNoTensor =
    std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_same_v<T, std::nullptr_t> ||
    std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view> ||
    std::is_same_v<T, c10::Scalar> || std::is_same_v<T, c10::Device>;

template <class T>
struct DependentFalse : std::false_type {};

/// `c10::optional` where it is a class of its own (libtorch before 2.4), not `std::optional`.
template <class T>
struct IsOwnC10Optional : std::false_type {};
template <class T>
struct IsOwnC10Optional<c10::optional<T>>
    : std::bool_constant<!std::is_same_v<c10::optional<T>, std::optional<T>>> {};

/// The customisation point: a `visit_tensors(T&, F&)` that argument-dependent lookup finds for a
/// user's type. The deleted declaration hides modhooks' own overloads from the call here, so
/// only argument-dependent lookup answers it.
namespace adl {
void visit_tensors() = delete;

template <class T, class F, class = void>
struct HasVisitTensors : std::false_type {};
template <class T, class F>
struct HasVisitTensors<T, F,
                       std::void_t<decltype(visit_tensors(std::declval<T&>(), std::declval<F&>()))>>
    : std::true_type {};

template <class T, class F>
void visit_user_type(T& value, F& f) {
  visit_tensors(value, f);
}
}  // namespace adl

/// Applies `f(at::Tensor&)` to every tensor in a forward's output, which `f` may replace in place
/// (Python's `_find_tensors`): tensors, `IValue`s, the standard containers, tuples, pairs,
/// optionals, `c10::List`, `c10::Dict`, `torch::OrderedDict` and nestings of them; a user's type
/// through its `visit_tensors` found by argument-dependent lookup; leaves that hold no tensor
/// (`kHoldsNoTensor`). Any other type is a compile-time error, never "no tensors". All are
/// declared first, so that each reaches the others in any nesting.
template <class F>
void visit_tensors(at::Tensor& tensor, F& f);
template <class F>
void visit_tensors(c10::IValue& value, F& f);
template <class T, class A, class F>
void visit_tensors(std::vector<T, A>& values, F& f);
template <class A, class F>
void visit_tensors(std::vector<bool, A>& values, F& f);
template <class T, std::size_t N, class F>
void visit_tensors(std::array<T, N>& values, F& f);
template <class T, class A, class F>
void visit_tensors(std::deque<T, A>& values, F& f);
template <class T, class A, class F>
void visit_tensors(std::list<T, A>& values, F& f);
template <class F, class... T>
void visit_tensors(std::tuple<T...>& values, F& f);
template <class A, class B, class F>
void visit_tensors(std::pair<A, B>& values, F& f);
template <class K, class V, class C, class A, class F>
void visit_tensors(std::map<K, V, C, A>& values, F& f);
template <class K, class V, class H, class E, class A, class F>
void visit_tensors(std::unordered_map<K, V, H, E, A>& values, F& f);
template <class T, class F>
void visit_tensors(std::optional<T>& value, F& f);
template <class T, class F>
void visit_tensors(c10::List<T>& values, F& f);
template <class K, class V, class F>
void visit_tensors(c10::Dict<K, V>& values, F& f);
template <class K, class V, class F>
void visit_tensors(torch::OrderedDict<K, V>& values, F& f);
template <class T, class F>
void visit_tensors(T& value, F& f);

template <class F>
void visit_tensors(at::Tensor& tensor, F& f) {
  f(tensor);
}
template <class T, class A, class F>
void visit_tensors(std::vector<T, A>& values, F& f) {
  for (auto& value : values) visit_tensors(value, f);
}
template <class A, class F>
void visit_tensors(std::vector<bool, A>& /*values*/, F& /*f*/) {}  // holds no tensor
template <class T, std::size_t N, class F>
void visit_tensors(std::array<T, N>& values, F& f) {
  for (auto& value : values) visit_tensors(value, f);
}
template <class T, class A, class F>
void visit_tensors(std::deque<T, A>& values, F& f) {
  for (auto& value : values) visit_tensors(value, f);
}
template <class T, class A, class F>
void visit_tensors(std::list<T, A>& values, F& f) {
  for (auto& value : values) visit_tensors(value, f);
}
template <class F, class... T>
void visit_tensors(std::tuple<T...>& values, F& f) {
  std::apply([&](auto&... value) { (visit_tensors(value, f), ...); }, values);
}
template <class A, class B, class F>
void visit_tensors(std::pair<A, B>& values, F& f) {
  visit_tensors(values.first, f);
  visit_tensors(values.second, f);
}
template <class K, class V, class C, class A, class F>
void visit_tensors(std::map<K, V, C, A>& values, F& f) {
  for (auto& [key, value] : values) visit_tensors(value, f);
}
template <class K, class V, class H, class E, class A, class F>
void visit_tensors(std::unordered_map<K, V, H, E, A>& values, F& f) {
  for (auto& [key, value] : values) visit_tensors(value, f);
}
template <class T, class F>
void visit_tensors(std::optional<T>& value, F& f) {
  if (value) visit_tensors(*value, f);
}
// c10::List and c10::Dict hand out copies of their elements: each is visited and put back.
template <class T, class F>
void visit_tensors(c10::List<T>& values, F& f) {
  if constexpr (!kHoldsNoTensor<T>) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      T element = values.get(i);
      visit_tensors(element, f);
      values.set(i, std::move(element));
    }
  }
}
template <class K, class V, class F>
void visit_tensors(c10::Dict<K, V>& values, F& f) {
  if constexpr (!kHoldsNoTensor<V>) {
    for (const auto& entry : values) {
      V element = entry.value();
      visit_tensors(element, f);
      entry.setValue(std::move(element));
    }
  }
}
template <class K, class V, class F>
void visit_tensors(torch::OrderedDict<K, V>& values, F& f) {
  for (auto& item : values) visit_tensors(item.value(), f);
}
template <class T, class F>
void visit_tensors(T& value, F& f) {
  using U = std::remove_cv_t<T>;
  if constexpr (kHoldsNoTensor<U>) {
    // holds no tensor
  } else if constexpr (IsOwnC10Optional<U>::value) {
    if (value) visit_tensors(*value, f);
  } else if constexpr (adl::HasVisitTensors<T, F>::value) {
    adl::visit_user_type(value, f);
  } else {
    static_assert(DependentFalse<T>::value,
                  "modhooks: DistributedDataParallel cannot find the tensors of this output "
                  "type; declare `template <class F> void visit_tensors(YourType&, F& f)` beside "
                  "it, found by argument-dependent lookup, that calls f(tensor) or "
                  "modhooks::dist::visit_tensors(member, f) for each member (the customisation "
                  "point modhooks::dist::visit_tensors, see docs/dist.md)");
  }
}
template <class F>
void visit_tensors(c10::IValue& value, F& f) {
  if (value.isTensor()) {
    at::Tensor tensor = value.toTensor();
    f(tensor);
    value = tensor;
  } else if (value.isList()) {
    auto list = value.toList();
    for (std::size_t i = 0; i < list.size(); ++i) {
      c10::IValue element = list.get(i);
      visit_tensors(element, f);
      list.set(i, std::move(element));
    }
  } else if (value.isTuple()) {
    auto tuple = value.toTuple();
    for (std::size_t i = 0; i < tuple->elements().size(); ++i) {
      c10::IValue element = tuple->elements()[i];
      visit_tensors(element, f);
      tuple->unsafeSetElement(i, std::move(element));
    }
  } else if (value.isGenericDict()) {
    for (auto& entry : value.toGenericDict()) {
      c10::IValue element = entry.value();
      visit_tensors(element, f);
      entry.setValue(std::move(element));
    }
  }
}

/// The function object behind `modhooks::dist::visit_tensors`.
struct VisitTensors {
  template <class T, class F>
  void operator()(T& value, F&& f) const {
    detail::visit_tensors(value, f);
  }
};

}  // namespace detail

/// \addtogroup api_dist
/// @{

/// Applies `f(at::Tensor&)` to every tensor in `value`, as `DistributedDataParallel` finds the
/// tensors of a forward's output (Python's `_find_tensors`); `f` may replace a tensor in place.
/// It knows `at::Tensor`, `c10::IValue`, `std::vector`, `std::array`, `std::deque`, `std::list`,
/// `std::tuple`, `std::pair`, `std::map`, `std::unordered_map`, `std::optional`, `c10::List`,
/// `c10::Dict`, `torch::OrderedDict` and nestings of them, and leaves that hold no tensor
/// (numbers, enums, strings). It is also the customisation point for a type of one's own:
/// declare `visit_tensors(YourType&, F&)` beside the type (argument-dependent lookup finds it)
/// and call this for its members. Any other type fails to compile (a `static_assert`).
///
/// **Example**:
/// \code
///   namespace my {
///   struct Output { at::Tensor logits; std::vector<at::Tensor> hidden; int steps; };
///   template <class F>
///   void visit_tensors(Output& out, F& f) {
///     f(out.logits);
///     modhooks::dist::visit_tensors(out.hidden, f);
///   }
///   }  // namespace my
/// \endcode
inline constexpr detail::VisitTensors visit_tensors{};

/// @}

/// \addtogroup api_dist
/// @{

/// What `DistributedDataParallel` does apart from calling the module: the c10d Reducer and its
/// process group, the buffers' broadcast, `no_sync`, comm hooks and `zero_grad`. The template
/// above it adds the module's type.
///
/// **Example**:
/// \code
///   void step(modhooks::dist::DistributedDataParallelBase& ddp) { ddp.zero_grad(); }
/// \endcode
class DistributedDataParallelBase : public torch::nn::Module {
 public:
  ~DistributedDataParallelBase() override;
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  /// Python's `with ddp.no_sync():` as a guard: while it lives, forwards and backwards
  /// accumulate gradients locally; the first backward after it reduces the sum.
  ///
  /// **Example**:
  /// \code
  ///   {
  ///     auto guard = ddp.no_sync();
  ///     ddp(x).sum().backward();  // not reduced
  ///   }
  ///   ddp(y).sum().backward();    // reduces the sum of both
  /// \endcode
  class NoSyncGuard {
   public:
    /// Starts accumulating locally on `ddp`, as `ddp.no_sync()` does.
    ///
    /// **Example**:
    /// \code
    ///   modhooks::dist::DistributedDataParallelBase::NoSyncGuard guard(ddp);
    /// \endcode
    explicit NoSyncGuard(DistributedDataParallelBase& ddp);
    /// Takes over `other`'s guard. \see \ref api_dist
    NoSyncGuard(NoSyncGuard&& other) noexcept;
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;
    ~NoSyncGuard();

   private:
    DistributedDataParallelBase* ddp_;
    bool previous_;
  };
  /// Python's `ddp.no_sync()`: gradients accumulate locally while the guard lives.
  ///
  /// **Example**:
  /// \code
  ///   auto guard = ddp.no_sync();
  /// \endcode
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Python's `register_comm_hook`: once, before the first forward (unless
  /// `gradient_as_bucket_view`, modhooks puts the Reducer's own reduction in place as a hook then
  /// when none was registered). The futures of every hook but c10d's built-ins
  /// (`CommHook::builtin`) are watched: when a bucket's reduction fails (a rank died),
  /// `backward()` raises `modhooks::Error` `dist.backward.reduction_failed` ("modhooks: a gradient
  /// bucket's reduction failed during backward: ..."), not what the backend raised.
  ///
  /// **Example**:
  /// \code
  ///   ddp.register_comm_hook(modhooks::dist::comm_hooks::bf16_compress());
  /// \endcode
  void register_comm_hook(const CommHook& hook);
  /// A c10d hook object of one's own.
  ///
  /// **Example**:
  /// \code
  ///   ddp.register_comm_hook(std::make_unique<MyCommHook>());  // a c10d::CommHookInterface
  /// \endcode
  void register_comm_hook(std::unique_ptr<c10d::CommHookInterface> hook);
  /// A function of one's own: `hook(c10d::GradBucket&) -> c10::intrusive_ptr<Future>`, whose
  /// future holds the reduced bucket (or a list whose first tensor is).
  ///
  /// **Example**:
  /// \code
  ///   ddp.register_comm_hook([group = ddp.process_group()](c10d::GradBucket& bucket) {
  ///     std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(group->getSize())};
  ///     return group->allreduce(tensors)->getFuture();
  ///   });
  /// \endcode
  template <class F, std::enable_if_t<std::is_constructible_v<CommHook::Function, F> &&
                                          !std::is_same_v<std::decay_t<F>, CommHook>,
                                      int> = 0>
  void register_comm_hook(F&& hook) {
    register_comm_hook(CommHook(CommHook::Function(std::forward<F>(hook))));
  }

  /// Clears the module's gradients: drops them (`set_to_none`) or zeroes them in place, which
  /// keeps bucket views intact where `Optimizer::zero_grad` would fail on them.
  ///
  /// **Example**:
  /// \code
  ///   ddp.zero_grad();  // before each step, in place of optimizer.zero_grad()
  /// \endcode
  void zero_grad(bool set_to_none = true) override;

  /// The group the gradients are reduced over.
  ///
  /// **Example**:
  /// \code
  ///   int ranks = ddp.process_group()->getSize();
  /// \endcode
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const;
  /// The options it was made with.
  ///
  /// **Example**:
  /// \code
  ///   bool find_unused = ddp.options().find_unused_parameters();
  /// \endcode
  const DDPOptions& options() const;

 protected:
  /// Builds the Reducer over `module`'s parameters; what the constructor of
  /// `DistributedDataParallel` does.
  DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, DDPOptions options);

  /// Python's `_pre_forward`: Reducer bookkeeping, bucket rebuild, buffers broadcast.
  void pre_forward();
  /// Python's `_post_forward`: `prepare_for_backward`, and the `_DDPSink` over `outputs` where
  /// Python runs it (find_unused_parameters, or static_graph's first step); returns whether it
  /// replaced any of `outputs`.
  bool post_forward(std::vector<at::Tensor>& outputs);

 private:
  /// Raises when a hook (the user's or the default one) is already in place.
  void check_hook_registration() const;

  std::shared_ptr<detail::DDPState> state_;
};

/// Python's `torch.nn.parallel.DistributedDataParallel` on c10d: the same c10d Reducer Python's
/// DDP drives (buckets all-reduced from autograd hooks while backward runs), driven the same way,
/// so parameters stay bitwise equal to a Python DDP run of the same model and data.
///
/// It is an nn module whose only child, "module", is the wrapped model: `parameters()` are the
/// model's, and `modhooks::state_dict(ddp)` has Python DDP's "module." keys. `ddp(args...)`
/// runs the model's `forward` through `modhooks::call` (hooks on the DDP object, the model and
/// its children fire as without DDP) and returns what it returns.
///
/// **Example**:
/// \code
///   modhooks::dist::init_process_group();   // under torchrun --no-python
///   modhooks::dist::DistributedDataParallel ddp(net,
///                                               modhooks::dist::DDPOptions().bucket_cap_mb(25));
///   torch::optim::SGD opt(ddp.parameters(), 0.1);
///   ddp(x).sum().backward();
///   opt.step();
/// \endcode
template <class Impl>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  /// Wraps `module`: any spelling `modhooks::register_*` accepts (a holder, a `shared_ptr<T>`,
  /// a `T&` owned by a `shared_ptr`). Collective: every rank of the group must construct it.
  /// Checks the model is the same on every rank, then broadcasts rank 0's parameters and
  /// buffers. Raises `modhooks::Error` on every rank when the models differ.
  ///
  /// **Example**:
  /// \code
  ///   Net net;  // a holder declared with TORCH_MODULE or MODHOOKS_MODULE
  ///   modhooks::dist::DistributedDataParallel ddp(net, modhooks::dist::DDPOptions());
  /// \endcode
  template <class M, modhooks::detail::IfNnModule<M> = 0>
  explicit DistributedDataParallel(M&& module, DDPOptions options = DDPOptions())
      : DistributedDataParallelBase(share(module), std::move(options)),
        module_(std::static_pointer_cast<Impl>(share(module))) {}

  /// The forward of Python's DDP: runs `module()` through `modhooks::call` between the
  /// Reducer's per-step calls. Hooks on the DDP object itself do not fire here; they do through
  /// `ddp(args...)` and `modhooks::call(ddp, args...)`.
  ///
  /// **Example**:
  /// \code
  ///   at::Tensor y = ddp.forward(x);
  /// \endcode
  template <class... Args>
  auto forward(Args&&... args)
      -> decltype(modhooks::call(std::declval<Impl&>(), std::forward<Args>(args)...)) {
    pre_forward();
    auto output = modhooks::call(*module_, std::forward<Args>(args)...);
    // An undefined tensor (an output Python gives as None) holds none, as in Python's DDP.
    std::vector<at::Tensor> tensors;
    auto collect = [&](at::Tensor& t) {
      if (t.defined()) tensors.push_back(t);
    };
    detail::visit_tensors(output, collect);
    if (post_forward(tensors)) {
      std::size_t i = 0;
      auto replace = [&](at::Tensor& t) {
        if (t.defined()) t = tensors[i++];
      };
      detail::visit_tensors(output, replace);
    }
    return output;
  }

  /// `ddp(args...)`: `forward` through modhooks' call path, so hooks on the DDP object fire too.
  ///
  /// **Example**:
  /// \code
  ///   ddp(x).sum().backward();  // gradients all-reduced while backward runs
  /// \endcode
  template <class... Args>
  auto operator()(Args&&... args)
      -> decltype(std::declval<DistributedDataParallel&>().forward(std::forward<Args>(args)...)) {
    return modhooks::call(*this, std::forward<Args>(args)...);
  }

  /// The wrapped model (Python's `ddp.module`).
  ///
  /// **Example**:
  /// \code
  ///   NetImpl& model = ddp.module();
  /// \endcode
  Impl& module() const { return *module_; }
  /// The wrapped model's `shared_ptr`.
  ///
  /// **Example**:
  /// \code
  ///   std::shared_ptr<NetImpl> model = ddp.module_ptr();
  /// \endcode
  const std::shared_ptr<Impl>& module_ptr() const { return module_; }

 private:
  template <class M>
  static std::shared_ptr<torch::nn::Module> share(M& module) {
    auto& impl = modhooks::detail::module_ref(module);
    return static_cast<torch::nn::Module&>(impl).shared_from_this();
  }

  std::shared_ptr<Impl> module_;
};

/// Deduces `Impl` from the module: `DistributedDataParallel ddp(net, options)` wraps a `NetImpl`.
/// \see \ref api_dist
template <class M, modhooks::detail::IfNnModule<M> = 0>
DistributedDataParallel(M&&, DDPOptions) -> DistributedDataParallel<
    std::remove_reference_t<decltype(modhooks::detail::module_ref(std::declval<M&>()))>>;
/// The same without options: `DistributedDataParallel ddp(net)`. \see \ref api_dist
template <class M, modhooks::detail::IfNnModule<M> = 0>
DistributedDataParallel(M&&) -> DistributedDataParallel<
    std::remove_reference_t<decltype(modhooks::detail::module_ref(std::declval<M&>()))>>;

/// Python's `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present`: strips `prefix`
/// from the keys that start with it (and from the metadata's), in place, as Python does (a
/// stripped key moves to the end, so a dict whose keys all carry the prefix keeps its order).
///
/// **Example**:
/// \code
///   modhooks::StateDict sd = modhooks::state_dict(ddp);  // "module.fc.weight", ...
///   modhooks::dist::consume_prefix_in_state_dict_if_present(sd, "module.");  // "fc.weight"
/// \endcode
void consume_prefix_in_state_dict_if_present(StateDict& state_dict, const std::string& prefix);

/// @}

}  // namespace dist
MODHOOKS_END_NAMESPACE
