// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/optim/optim.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "state_key.h"

MODHOOKS_BEGIN_NAMESPACE
namespace optim {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

enum class Algorithm { kSGD, kAdam, kAdamW, kRMSprop, kAdagrad };

Algorithm algorithm_of(const Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return Algorithm::kSGD;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return Algorithm::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return Algorithm::kAdamW;
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer)) return Algorithm::kRMSprop;
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer)) return Algorithm::kAdagrad;
  detail::fail<TypeError>(
      "optim.optimizer.unsupported",
      "modhooks: only libtorch's SGD, Adam, AdamW, RMSprop and Adagrad are supported");
}

using detail::state_key;

// --- Python -> libtorch

template <class E>
[[noreturn]] void fail(const char* id, const std::string& message) {
  detail::fail<E>(id, "modhooks: optim::load_state_dict: " + message);
}

/// A hyper-parameter Python keeps as a float, an int or a one-element tensor (a tensor lr).
double number(const c10::IValue& v, const std::string& what) {
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
  if (v.isTensor() && v.toTensor().numel() == 1) return v.toTensor().item<double>();
  fail<TypeError>("optim.load.not_a_number", what + " is a " + v.tagKind() + ", not a number");
}

bool flag(const c10::IValue& v, const std::string& what) {
  if (v.isBool()) return v.toBool();
  if (v.isNone()) return false;
  fail<TypeError>("optim.load.not_a_bool", what + " is a " + v.tagKind() + ", not a bool");
}

/// Reads the group's hyper-parameters into a copy of the group's options.
class GroupReader {
 public:
  GroupReader(const c10::impl::GenericDict& group, std::size_t index)
      : group_(group), where_("param_groups[" + std::to_string(index) + "]") {}

  /// Sets `set(value)` when the group has `key`.
  template <class Set>
  void read_number(const char* key, Set set) const {
    if (auto v = find(key)) set(number(*v, where(key)));
  }
  template <class Set>
  void read_flag(const char* key, Set set) const {
    if (auto v = find(key)) set(flag(*v, where(key)));
  }
  /// Fails when the group sets `key` to true: a choice libtorch's step does not have.
  void refuse(const char* key, const char* why) const {
    if (auto v = find(key); v && flag(*v, where(key)))
      fail<ValueError>("optim.load.unsupported_option", where(key) + " is True: " + why);
  }
  std::optional<c10::IValue> find(const char* key) const {
    auto found = group_.find(c10::IValue(std::string(key)));
    if (found == group_.end()) return std::nullopt;
    return found->value();
  }
  std::string where(const char* key) const { return where_ + "['" + key + "']"; }

 private:
  const c10::impl::GenericDict& group_;
  std::string where_;
};

std::unique_ptr<OptimizerOptions> read_options(Algorithm algorithm, const OptimizerOptions& current,
                                               const GroupReader& g) {
  std::unique_ptr<OptimizerOptions> options = current.clone();
  g.refuse("maximize", "libtorch's optimizers have no maximize");
  switch (algorithm) {
    case Algorithm::kSGD: {
      auto& o = static_cast<torch::optim::SGDOptions&>(*options);
      g.read_number("lr", [&](double v) { o.lr(v); });
      g.read_number("momentum", [&](double v) { o.momentum(v); });
      g.read_number("dampening", [&](double v) { o.dampening(v); });
      g.read_number("weight_decay", [&](double v) { o.weight_decay(v); });
      g.read_flag("nesterov", [&](bool v) { o.nesterov(v); });
      break;
    }
    case Algorithm::kAdam:
    case Algorithm::kAdamW: {
      auto read = [&](auto& o) {
        g.read_number("lr", [&](double v) { o.lr(v); });
        if (auto betas = g.find("betas")) {
          if (!betas->isTuple() || betas->toTupleRef().elements().size() != 2) {
            fail<TypeError>("optim.load.betas_not_pair", g.where("betas") + " is not a pair");
          }
          const auto& b = betas->toTupleRef().elements();
          o.betas(std::make_tuple(number(b[0], g.where("betas")), number(b[1], g.where("betas"))));
        }
        g.read_number("eps", [&](double v) { o.eps(v); });
        g.read_number("weight_decay", [&](double v) { o.weight_decay(v); });
        g.read_flag("amsgrad", [&](bool v) { o.amsgrad(v); });
      };
      // Python's AdamW is Adam with decoupled_weight_decay=True; libtorch has two classes.
      if (auto decoupled = g.find("decoupled_weight_decay")) {
        const bool want = flag(*decoupled, g.where("decoupled_weight_decay"));
        if (want != (algorithm == Algorithm::kAdamW)) {
          fail<ValueError>("optim.load.adam_kind_mismatch",
                           g.where("decoupled_weight_decay") + " is " + (want ? "True" : "False") +
                               ", which is libtorch's " + (want ? "AdamW" : "Adam") + ", not " +
                               (want ? "Adam" : "AdamW"));
        }
      }
      if (algorithm == Algorithm::kAdam) {
        read(static_cast<torch::optim::AdamOptions&>(*options));
      } else {
        read(static_cast<torch::optim::AdamWOptions&>(*options));
      }
      break;
    }
    case Algorithm::kRMSprop: {
      auto& o = static_cast<torch::optim::RMSpropOptions&>(*options);
      g.read_number("lr", [&](double v) { o.lr(v); });
      g.read_number("alpha", [&](double v) { o.alpha(v); });
      g.read_number("eps", [&](double v) { o.eps(v); });
      g.read_number("weight_decay", [&](double v) { o.weight_decay(v); });
      g.read_number("momentum", [&](double v) { o.momentum(v); });
      g.read_flag("centered", [&](bool v) { o.centered(v); });
      break;
    }
    case Algorithm::kAdagrad: {
      auto& o = static_cast<torch::optim::AdagradOptions&>(*options);
      g.read_number("lr", [&](double v) { o.lr(v); });
      g.read_number("lr_decay", [&](double v) { o.lr_decay(v); });
      g.read_number("weight_decay", [&](double v) { o.weight_decay(v); });
      g.read_number("initial_accumulator_value", [&](double v) { o.initial_accumulator_value(v); });
      g.read_number("eps", [&](double v) { o.eps(v); });
      break;
    }
  }
  return options;
}

/// One parameter's state as Python saved it.
class ParamStateReader {
 public:
  ParamStateReader(const c10::IValue& state, const at::Tensor& param, std::int64_t index)
      : param_(param), where_("state[" + std::to_string(index) + "]") {
    if (!state.isGenericDict())
      fail<TypeError>("optim.load.not_a_dict",
                      where_ + " is a " + state.tagKind() + ", not a dict");
    state_ = state.toGenericDict();
  }

  bool has(const char* key) const {
    auto found = state_.find(c10::IValue(std::string(key)));
    return found != state_.end() && !found->value().isNone();
  }
  /// A copy of tensor `key`, converted as Python's load_state_dict converts it: to the
  /// parameter's dtype (floating parameters) and device. Its shape must be the parameter's.
  at::Tensor tensor(const char* key) const {
    if (!has(key)) fail<KeyError>("optim.load.missing_key", where_ + " has no '" + key + "'");
    const c10::IValue v = state_.at(c10::IValue(std::string(key)));
    if (!v.isTensor())
      fail<TypeError>("optim.load.not_a_tensor",
                      where_ + "['" + key + "'] is a " + v.tagKind() + ", not a tensor");
    const at::Tensor& t = v.toTensor();
    if (t.sizes() != param_.sizes()) {
      fail<ValueError>("optim.load.state_size_mismatch",
                       where_ + "['" + key + "'] has size " + c10::str(t.sizes()) +
                           " but its parameter " + c10::str(param_.sizes()));
    }
    const auto options = param_.is_floating_point() ? param_.options() : t.options();
    return t.detach().to(options.device(param_.device()), /*non_blocking=*/false,
                         /*copy=*/true);
  }
  /// Python's step: a float tensor (an int or float in older files) holding a whole number.
  std::int64_t step() const {
    if (!has("step")) fail<KeyError>("optim.load.missing_key", where_ + " has no 'step'");
    const double step = number(state_.at(c10::IValue(std::string("step"))), where_ + "['step']");
    if (!(step >= 0) || step != std::floor(step) || step > 9.0e15) {
      fail<ValueError>("optim.load.bad_step",
                       where_ + "['step'] is " + std::to_string(step) + ", not a count of steps");
    }
    return static_cast<std::int64_t>(step);
  }

 private:
  c10::impl::GenericDict state_{c10::StringType::get(), c10::AnyType::get()};
  const at::Tensor& param_;
  std::string where_;
};

/// libtorch's state of one parameter from Python's, under the group's (new) options.
std::unique_ptr<OptimizerParamState> read_param_state(Algorithm algorithm,
                                                      const OptimizerOptions& options,
                                                      const ParamStateReader& s) {
  switch (algorithm) {
    case Algorithm::kSGD: {
      // Python keeps momentum_buffer None until the first step with momentum; libtorch has no
      // state then, and both start the buffer from the gradient.
      if (!s.has("momentum_buffer")) return nullptr;
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(s.tensor("momentum_buffer"));
      return state;
    }
    case Algorithm::kAdam:
    case Algorithm::kAdamW: {
      auto fill = [&](auto state, bool amsgrad) {
        state->step(s.step());
        state->exp_avg(s.tensor("exp_avg"));
        state->exp_avg_sq(s.tensor("exp_avg_sq"));
        if (amsgrad || s.has("max_exp_avg_sq")) state->max_exp_avg_sq(s.tensor("max_exp_avg_sq"));
        return std::unique_ptr<OptimizerParamState>(std::move(state));
      };
      if (algorithm == Algorithm::kAdam) {
        return fill(std::make_unique<torch::optim::AdamParamState>(),
                    static_cast<const torch::optim::AdamOptions&>(options).amsgrad());
      }
      return fill(std::make_unique<torch::optim::AdamWParamState>(),
                  static_cast<const torch::optim::AdamWOptions&>(options).amsgrad());
    }
    case Algorithm::kRMSprop: {
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
      auto state = std::make_unique<torch::optim::RMSpropParamState>();
      state->step(s.step());
      state->square_avg(s.tensor("square_avg"));
      if (o.momentum() > 0 || s.has("momentum_buffer")) {
        state->momentum_buffer(s.tensor("momentum_buffer"));
      }
      if (o.centered() || s.has("grad_avg")) state->grad_avg(s.tensor("grad_avg"));
      return state;
    }
    case Algorithm::kAdagrad: {
      auto state = std::make_unique<torch::optim::AdagradParamState>();
      state->step(s.step());
      state->sum(s.tensor("sum"));
      return state;
    }
  }
  return nullptr;
}

c10::impl::GenericDict expect_dict(const c10::IValue& v, const std::string& what) {
  if (!v.isGenericDict())
    fail<TypeError>("optim.load.not_a_dict", what + " is a " + v.tagKind() + ", not a dict");
  return v.toGenericDict();
}

c10::IValue expect_key(const c10::impl::GenericDict& dict, const char* key,
                       const std::string& what) {
  auto found = dict.find(c10::IValue(std::string(key)));
  if (found == dict.end()) fail<KeyError>("optim.load.missing_key", what + " has no '" + key + "'");
  return found->value();
}

// --- libtorch -> Python

at::Tensor python_step(std::int64_t step) {
  // Python's steps are float32 scalar tensors (torch.tensor(0.0, dtype=_get_scalar_dtype())).
  return at::scalar_tensor(static_cast<double>(step), at::TensorOptions().dtype(at::kFloat));
}

using Entries = std::vector<std::pair<const char*, c10::IValue>>;

/// Python's param_group keys in Python's order, without "params".
Entries group_entries(Algorithm algorithm, const OptimizerOptions& options) {
  const c10::IValue none;
  switch (algorithm) {
    case Algorithm::kSGD: {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
      return {{"lr", o.lr()},
              {"momentum", o.momentum()},
              {"dampening", o.dampening()},
              {"weight_decay", o.weight_decay()},
              {"nesterov", o.nesterov()},
              {"maximize", false},
              {"foreach", none},
              {"differentiable", false},
              {"fused", none}};
    }
    case Algorithm::kAdam:
    case Algorithm::kAdamW: {
      auto entries = [&](const auto& o) -> Entries {
        return {
            {"lr", o.lr()},
            {"betas", c10::ivalue::Tuple::create(std::get<0>(o.betas()), std::get<1>(o.betas()))},
            {"eps", o.eps()},
            {"weight_decay", o.weight_decay()},
            {"amsgrad", o.amsgrad()},
            {"maximize", false},
            {"foreach", none},
            {"capturable", false},
            {"differentiable", false},
            {"fused", none},
            {"decoupled_weight_decay", algorithm == Algorithm::kAdamW}};
      };
      if (algorithm == Algorithm::kAdam) {
        return entries(static_cast<const torch::optim::AdamOptions&>(options));
      }
      return entries(static_cast<const torch::optim::AdamWOptions&>(options));
    }
    case Algorithm::kRMSprop: {
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
      return {
          {"lr", o.lr()},           {"momentum", o.momentum()}, {"alpha", o.alpha()},
          {"eps", o.eps()},         {"centered", o.centered()}, {"weight_decay", o.weight_decay()},
          {"capturable", false},    {"foreach", none},          {"maximize", false},
          {"differentiable", false}};
    }
    case Algorithm::kAdagrad: {
      const auto& o = static_cast<const torch::optim::AdagradOptions&>(options);
      return {{"lr", o.lr()},
              {"lr_decay", o.lr_decay()},
              {"eps", o.eps()},
              {"weight_decay", o.weight_decay()},
              {"initial_accumulator_value", o.initial_accumulator_value()},
              {"foreach", none},
              {"maximize", false},
              {"differentiable", false},
              {"fused", none}};
    }
  }
  return {};
}

/// Python's per-parameter state of libtorch's, in Python's key order.
Entries state_entries(Algorithm algorithm, const OptimizerParamState& state) {
  Entries out;
  auto add = [&](const char* key, const at::Tensor& t) {
    if (t.defined()) out.emplace_back(key, t);
  };
  switch (algorithm) {
    case Algorithm::kSGD:
      add("momentum_buffer",
          static_cast<const torch::optim::SGDParamState&>(state).momentum_buffer());
      break;
    case Algorithm::kAdam:
    case Algorithm::kAdamW: {
      auto entries = [&](const auto& s) {
        out.emplace_back("step", python_step(s.step()));
        add("exp_avg", s.exp_avg());
        add("exp_avg_sq", s.exp_avg_sq());
        add("max_exp_avg_sq", s.max_exp_avg_sq());
      };
      if (algorithm == Algorithm::kAdam) {
        entries(static_cast<const torch::optim::AdamParamState&>(state));
      } else {
        entries(static_cast<const torch::optim::AdamWParamState&>(state));
      }
      break;
    }
    case Algorithm::kRMSprop: {
      const auto& s = static_cast<const torch::optim::RMSpropParamState&>(state);
      out.emplace_back("step", python_step(s.step()));
      add("square_avg", s.square_avg());
      add("momentum_buffer", s.momentum_buffer());
      add("grad_avg", s.grad_avg());
      break;
    }
    case Algorithm::kAdagrad: {
      const auto& s = static_cast<const torch::optim::AdagradParamState&>(state);
      out.emplace_back("step", python_step(s.step()));
      add("sum", s.sum());
      break;
    }
  }
  return out;
}

}  // namespace

void load_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& python_state) {
  const Algorithm algorithm = algorithm_of(optimizer);
  const c10::impl::GenericDict root = expect_dict(python_state, "the state");
  const c10::impl::GenericDict saved_state =
      expect_dict(expect_key(root, "state", "the state"), "state");
  const c10::IValue groups_value = expect_key(root, "param_groups", "the state");
  if (!groups_value.isList()) {
    fail<TypeError>("optim.load.not_a_list",
                    std::string("param_groups is a ") + groups_value.tagKind() + ", not a list");
  }
  const c10::ArrayRef<c10::IValue> saved_groups = groups_value.toListRef();
  auto& groups = optimizer.param_groups();
  // Python's checks and messages.
  if (saved_groups.size() != groups.size()) {
    detail::fail<ValueError>("optim.load.group_count_mismatch",
                             "loaded state dict has a different number of parameter groups");
  }
  std::vector<c10::impl::GenericDict> saved;
  std::vector<std::vector<std::int64_t>> saved_ids;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string where = "param_groups[" + std::to_string(i) + "]";
    saved.push_back(expect_dict(saved_groups[i], where));
    const c10::IValue params = expect_key(saved.back(), "params", where);
    if (!params.isList())
      fail<TypeError>("optim.load.not_a_list", where + "['params'] is not a list");
    std::vector<std::int64_t> ids;
    for (const c10::IValue& id : params.toListRef()) {
      if (!id.isInt())
        fail<TypeError>("optim.load.not_an_int",
                        where + "['params'] holds a " + id.tagKind() + ", not an int");
      ids.push_back(id.toInt());
    }
    if (ids.size() != groups[i].params().size()) {
      detail::fail<ValueError>(
          "optim.load.group_size_mismatch",
          "loaded state dict contains a parameter group that doesn't match the size of "
          "optimizer's group");
    }
    saved_ids.push_back(std::move(ids));
  }

  // Everything is read and checked into new options and a new state map before the optimizer
  // changes; committing them cannot throw.
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  auto new_state = std::remove_reference_t<decltype(optimizer.state())>();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    new_options.push_back(read_options(algorithm, groups[i].options(), GroupReader(saved[i], i)));
    const auto& params = groups[i].params();
    for (std::size_t j = 0; j < params.size(); ++j) {
      const at::Tensor& param = params[j];
      const auto key = state_key(new_state, param);
      auto found = saved_state.find(c10::IValue(saved_ids[i][j]));
      std::unique_ptr<OptimizerParamState> state;
      if (found != saved_state.end()) {
        state = read_param_state(algorithm, *new_options.back(),
                                 ParamStateReader(found->value(), param, saved_ids[i][j]));
      }
      if (!state && algorithm == Algorithm::kAdagrad) {
        // libtorch's Adagrad steps only parameters with state, which its constructor gives
        // every parameter; Python's gives every parameter state too.
        const auto& o = static_cast<const torch::optim::AdagradOptions&>(*new_options.back());
        auto fresh = std::make_unique<torch::optim::AdagradParamState>();
        fresh->step(0);
        fresh->sum(at::full_like(param.detach(), o.initial_accumulator_value()));
        state = std::move(fresh);
      }
      if (state) new_state[key] = std::move(state);
    }
  }
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i].set_options(std::move(new_options[i]));
  optimizer.state().swap(new_state);
}

c10::IValue state_dict(const torch::optim::Optimizer& optimizer) {
  const Algorithm algorithm = algorithm_of(optimizer);
  const auto& live = optimizer.state();
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  std::int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
    for (auto& [key, value] : group_entries(algorithm, group.options())) out.insert(key, value);
    c10::List<std::int64_t> ids;
    for (const at::Tensor& param : group.params()) {
      ids.push_back(index);
      auto found = live.find(state_key(live, param));
      if (found != live.end() && found->second) {
        c10::impl::GenericDict param_state(c10::StringType::get(), c10::AnyType::get());
        for (auto& [key, value] : state_entries(algorithm, *found->second)) {
          param_state.insert(key, value);
        }
        state.insert(index, std::move(param_state));
      }
      ++index;
    }
    out.insert("params", std::move(ids));
    groups.push_back(out);
  }
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("state", std::move(state));
  root.insert("param_groups", std::move(groups));
  return root;
}

}  // namespace optim
MODHOOKS_END_NAMESPACE
