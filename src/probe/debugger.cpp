// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/probe/debugger.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/core/handle.h"
#include "modhooks/dispatch/detail/backward_hook.h"
#include "modhooks/register.h"
#include "python_json.h"
#include "records.h"
#include "writer.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

using modhooks::detail::fail;

class ProbeBackward;

/// A module's own parameters, `named_parameters(recurse=False)`, in its order.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// What a debugger records and the hooks it placed. Hooks hold it by shared_ptr: a backward
/// wiring left in an autograd graph after the debugger died finds it stopped.
struct DebuggerState : std::enable_shared_from_this<DebuggerState> {
  explicit DebuggerState(const Config& cfg) : config(cfg) {
    const auto has = [&](const char* mode) {
      return std::find(config.data_mode.begin(), config.data_mode.end(), mode) !=
             config.data_mode.end();
    };
    // msprobe's _get_allowed_data_mode: a missing axis means both of its sides.
    const bool all = has("all");
    const bool fb = has("forward") || has("backward");
    const bool io = has("input") || has("output");
    forward = all || has("forward") || !fb;
    backward = all || has("backward") || !fb;
    inputs = all || has("input") || !io;
    outputs = all || has("output") || !io;
    maker.md5 = config.task == "statistics" && config.summary_mode == "md5";
    maker.files = config.task == "tensor";
    if (maker.files) {
      writer = std::make_unique<TensorWriter>(config.max_pending_bytes);
      maker.writer = writer.get();
    }
    const char* rank_env = std::getenv("RANK");
    if (rank_env != nullptr && *rank_env != '\0') {
      rank = std::stoll(rank_env);
      rank_dir = "rank" + std::string(rank_env);
    } else {
      rank_dir = "proc" + std::to_string(::getpid());
    }
  }

  // --- configuration
  Config config;
  std::unique_ptr<TensorWriter> writer;  // task "tensor": its files, off the training thread
  RecordMaker maker;
  // msprobe's allowed data modes: what is dumped of which direction.
  bool forward = true, backward = true, inputs = true, outputs = true;
  std::optional<int64_t> rank;
  std::string rank_dir;

  // --- the step being recorded (all under `mutex`)
  std::mutex mutex;
  bool running = false;  // between start() and stop(), in a step and rank that dump
  int64_t step = 0;
  std::string folder;  // <dump_path>/step<N>/<rank_dir>
  Json data = Json::object();
  Json construct = Json::object();
  bool dirty = false;
  std::map<std::string, int64_t> forward_count;  // per "Module.<path>.<Class>."
  std::map<std::string, int64_t> grad_count;     // per module and parameter
  std::map<std::string, bool> backward_dumped;   // per "Module.<path>.<Class>"
  std::vector<std::string> stack;                // entries entered and not left, as msprobe's
  bool in_scope = false;

  /// A forward call between its pre-hook and its forward hook.
  struct Pending {
    std::string name;
    c10::intrusive_ptr<ProbeBackward> backward;
  };
  /// Per module object (a torch::nn::Module, or a TorchScript module's object).
  std::map<const void*, std::vector<Pending>> pending;

  // --- the hooks placed by start()
  std::vector<RemovableHandle> handles;
  struct ParamHook {
    at::Tensor param;
    unsigned position;
  };
  std::vector<ParamHook> param_hooks;
  bool hooked = false;

  /// What `start` does before hooking, under `mutex`: whether the model's modules must be hooked
  /// now (this step and rank dump, and no earlier `start` hooked them).
  bool begin_start() {
    if (!step_dumps()) return false;
    make_folder();
    running = true;
    if (hooked) return false;
    hooked = true;
    return true;
  }

  /// The name of the next forward call of `prefix` ("Module.<path>.<Class>."): msprobe's
  /// counter, per module, from 0 in each step.
  std::string next_forward(const std::string& prefix) {
    auto [count, fresh] = forward_count.try_emplace(prefix, 0);
    if (!fresh) ++count->second;
    return prefix + "forward." + std::to_string(count->second);
  }

  /// The "input_args" and "input_kwargs" of a forward record.
  void record_inputs(const std::string& name, const std::vector<c10::IValue>& args) {
    if (!(forward && inputs && collects(name))) return;
    Json fields = Json::object();
    fields["input_args"] = list_of(args, name + ".input");
    fields["input_kwargs"] = Json::object();
    update(name, fields);
  }

  /// The "output" of a forward record: a list of one record, or a tuple's records.
  Json output_records(const c10::IValue& output, const std::string& name) const {
    if (output.isTuple()) return maker.value(output, name + ".output");
    return Json::array({maker.value(output, name + ".output.0")});
  }

  bool step_dumps() const {
    const bool step_ok = config.step.empty() || std::find(config.step.begin(), config.step.end(),
                                                          step) != config.step.end();
    const bool rank_ok =
        config.rank.empty() || !rank ||
        std::find(config.rank.begin(), config.rank.end(), *rank) != config.rank.end();
    return step_ok && rank_ok;
  }

  // msprobe's scope: a range of two entry names (ModuleRangeScope) and substrings (`list`).
  bool collects(const std::string& name) const {
    if (!config.scope.empty() && !in_scope) return false;
    if (config.list.empty()) return true;
    return std::any_of(config.list.begin(), config.list.end(),
                       [&](const std::string& s) { return name.find(s) != std::string::npos; });
  }

  void enter(const std::string& name) {
    construct[name] = stack.empty() ? Json(nullptr) : Json(stack.back());
    stack.push_back(name);
    if (!config.scope.empty() && name == config.scope[0]) in_scope = true;
  }

  void leave(const std::string& name) {
    if (!stack.empty()) stack.pop_back();
    if (!config.scope.empty() && name == config.scope[1]) in_scope = false;
  }

  /// A point's `leave`: its entry and what was entered after it and never left (a point with an
  /// input point and no output point is entered and never left: the enclosing point's output
  /// ends it).
  void leave_point(const std::string& name) {
    const auto it = std::find(stack.rbegin(), stack.rend(), name);
    if (it != stack.rend()) stack.erase(std::next(it).base(), stack.end());
    if (!config.scope.empty() && name == config.scope[1]) in_scope = false;
  }

  /// msprobe's update_data: a module entry seen again moves to the end with its new keys.
  void update(const std::string& name, const Json& fields) {
    dirty = true;
    auto it = data.find(name);
    if (it == data.end()) {
      data[name] = fields;
      return;
    }
    Json existing = *it;
    data.erase(it);
    for (auto field = fields.begin(); field != fields.end(); ++field) {
      existing[field.key()] = field.value();
    }
    data[name] = std::move(existing);
  }

  Json list_of(const std::vector<c10::IValue>& values, const std::string& stem) const {
    Json list = Json::array();
    for (std::size_t i = 0; i < values.size(); ++i) {
      list.push_back(maker.value(values[i], stem + "." + std::to_string(i)));
    }
    return list;
  }

  /// Gradients, leaving out the undefined ones (Python's None), as msprobe does.
  Json grads_of(const TensorList& grads, const std::string& stem) const {
    Json list = Json::array();
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined())
        list.push_back(maker.tensor(grads[i], stem + "." + std::to_string(i) + ".pt"));
    }
    return list;
  }

  void make_folder() {
    namespace fs = std::filesystem;
    folder = config.dump_path + "/step" + std::to_string(step) + "/" + rank_dir;
    const std::string tensors = folder + "/dump_tensor_data";
    std::error_code error;
    fs::create_directories(maker.files ? tensors : folder, error);
    if (error || ::access(folder.c_str(), W_OK) != 0) {
      fail<RuntimeError>("probe.dump.unwritable",
                         "modhooks: cannot write the dump folder '" + folder + "'" +
                             (error ? ": " + error.message() : std::string()));
    }
    maker.folder = tensors;
  }

  void write_file(const std::string& name, const Json& value) const {
    const std::string path = folder + "/" + name;
    const std::string temp = path + ".tmp";
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out << python_json(value);
      out.flush();
      if (!out) {
        std::remove(temp.c_str());
        fail<RuntimeError>("probe.dump.write_failed", "modhooks: could not write '" + path + "'");
      }
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      std::remove(temp.c_str());
      fail<RuntimeError>("probe.dump.write_failed", "modhooks: could not write '" + path + "'");
    }
  }

  /// dump.json, construct.json and stack.json of the step so far.
  void flush() {
    if (!dirty || folder.empty()) return;
    Json dump = Json::object();
    dump["task"] = config.task;
    dump["level"] = config.level;
    dump["framework"] = "pytorch";
    dump["dump_data_dir"] = maker.files ? Json(maker.folder) : Json(nullptr);
    dump["data"] = data;
    write_file("dump.json", dump);
    if (config.extra_info) {
      write_file("construct.json", construct);
      // No Python stack to show: compare reads `{}` as no stacks.
      write_file("stack.json", Json::object());
    }
    dirty = false;
  }

  void remove_hooks() {
    for (RemovableHandle& handle : handles) handle.remove();
    handles.clear();
    for (ParamHook& hook : param_hooks) hook.param.remove_hook(hook.position);
    param_hooks.clear();
    hooked = false;
  }

  // --- what the hooks do

  std::optional<std::vector<c10::IValue>> pre_hook(const std::string& prefix, const void* module,
                                                   const std::vector<c10::IValue>& args);
  /// `parameters`: the module's own, `named_parameters(recurse=False)`.
  std::optional<c10::IValue> forward_hook(const void* module, const c10::IValue& output,
                                          const NamedTensors& parameters);
  /// A compiled program's point (docs/probe.md): its input point, where it has one, and its
  /// output point. Forward only: no backward wiring, and no parameters (a point shows none).
  void point_input(const std::string& prefix, const void* point,
                   const std::vector<c10::IValue>& args);
  void point_output(const std::string& prefix, const void* point, const c10::IValue& output);
  void backward_begin(const std::string& name);
  void backward_end(const std::string& name, const std::string& module_name,
                    const TensorList& grad_input, const TensorList& grad_output);
  void param_grad(const std::string& module_name, const std::string& param_name,
                  const at::Tensor& param, const at::Tensor& grad);
};

/// The backward wiring of one forward call, msprobe's `BackwardHook(module, [backward_hook],
/// [backward_pre_hook])`: made in the pre-hook, so the backward entry takes its call's index,
/// and set on the output as forward returned it, before the user's forward hooks.
class ProbeBackward final : public modhooks::detail::BackwardHookBase {
 public:
  ProbeBackward(std::shared_ptr<DebuggerState> state, std::string name, std::string module_name)
      : state_(std::move(state)), name_(std::move(name)), module_name_(std::move(module_name)) {}

 private:
  void run_pre_hooks(TensorList& /*grad_output*/) override { state_->backward_begin(name_); }
  bool run_full_hooks(TensorList& grad_input, const TensorList& grad_output,
                      bool /*check_length*/) override {
    state_->backward_end(name_, module_name_, grad_input, grad_output);
    return false;
  }
  bool has_full_hooks() const override { return true; }

  std::shared_ptr<DebuggerState> state_;
  std::string name_;
  std::string module_name_;
};

namespace {

/// The top-level tensors of `values` and where they stand, as BackwardHook wraps them.
struct Tensors {
  TensorList tensors;
  std::vector<std::size_t> positions;
};

/// msprobe's wrap_setup_backward_hook: a tensor the wiring wrapped is a view its custom function
/// made, which PyTorch refuses to change in place; made an ordinary view, it can be changed in
/// place as without the probe (`ReLU(inplace=True)`, `out += identity`). Autograd then rebases it
/// past the wiring, and that call's backward entry is not dumped, as msprobe's is not.
void allow_in_place(const TensorList& wrapped) {
  namespace ta = torch::autograd;
  for (const at::Tensor& t : wrapped) {
    if (!t.defined() || !t.is_view()) continue;
    ta::DifferentiableViewMeta* meta = ta::impl::get_view_autograd_meta(t);
    if (meta != nullptr && meta->has_bw_view() &&
        meta->get_creation_meta() != ta::CreationMeta::DEFAULT) {
      meta->set_creation_meta(ta::CreationMeta::DEFAULT);
    }
  }
}

Tensors top_level_tensors(const std::vector<c10::IValue>& values) {
  Tensors out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].isTensor() && values[i].toTensor().defined()) {
      out.tensors.push_back(values[i].toTensor());
      out.positions.push_back(i);
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<c10::IValue>> DebuggerState::pre_hook(
    const std::string& prefix, const void* module, const std::vector<c10::IValue>& args) {
  const std::lock_guard<std::mutex> lock(mutex);
  if (!running) return std::nullopt;
  const std::string name = next_forward(prefix);
  const std::string index = name.substr(name.rfind('.') + 1);
  enter(name);
  record_inputs(name, args);
  auto backward = c10::make_intrusive<ProbeBackward>(
      shared_from_this(), prefix + "backward." + index, prefix.substr(0, prefix.size() - 1));
  pending[module].push_back(Pending{name, backward});
  Tensors found = top_level_tensors(args);
  TensorList wrapped = backward->setup_input(found.tensors, found.positions, args.size());
  if (found.tensors.empty() ||
      wrapped[0].unsafeGetTensorImpl() == found.tensors[0].unsafeGetTensorImpl()) {
    return std::nullopt;  // nothing wrapped: no input requires grad
  }
  allow_in_place(wrapped);
  std::vector<c10::IValue> replaced = args;
  for (std::size_t k = 0; k < found.positions.size(); ++k) {
    replaced[found.positions[k]] = wrapped[k];
  }
  return replaced;
}

std::optional<c10::IValue> DebuggerState::forward_hook(const void* module,
                                                       const c10::IValue& output,
                                                       const NamedTensors& parameters) {
  const std::lock_guard<std::mutex> lock(mutex);
  auto calls = pending.find(module);
  if (calls == pending.end() || calls->second.empty()) return std::nullopt;
  Pending call = std::move(calls->second.back());
  calls->second.pop_back();
  if (!running) return std::nullopt;
  if (forward && outputs && collects(call.name)) {
    Json fields = Json::object();
    fields["output"] = output_records(output, call.name);
    Json records = Json::object();
    for (const auto& [param_name, param] : parameters) {
      records[param_name] = maker.tensor(param, call.name + ".parameters." + param_name + ".pt");
    }
    fields["parameters"] = std::move(records);
    update(call.name, fields);
  }
  leave(call.name);
  // The output as forward returned it goes through the call's backward wiring.
  if (output.isTensor()) {
    const at::Tensor& tensor = output.toTensor();
    if (!tensor.defined()) return std::nullopt;
    TensorList wrapped = call.backward->setup_output({tensor}, {0}, 1);
    allow_in_place(wrapped);
    return c10::IValue(wrapped[0]);
  }
  if (output.isTuple()) {
    std::vector<c10::IValue> items = output.toTupleRef().elements().vec();
    Tensors found = top_level_tensors(items);
    TensorList wrapped = call.backward->setup_output(found.tensors, found.positions, items.size());
    allow_in_place(wrapped);
    for (std::size_t k = 0; k < found.positions.size(); ++k) {
      items[found.positions[k]] = wrapped[k];
    }
    return c10::IValue(c10::ivalue::Tuple::create(std::move(items)));
  }
  return std::nullopt;
}

void DebuggerState::point_input(const std::string& prefix, const void* point,
                                const std::vector<c10::IValue>& args) {
  const std::lock_guard<std::mutex> lock(mutex);
  if (!running) return;
  const std::string name = next_forward(prefix);
  enter(name);
  record_inputs(name, args);
  pending[point].push_back(Pending{name, {}});
}

void DebuggerState::point_output(const std::string& prefix, const void* point,
                                 const c10::IValue& output) {
  const std::lock_guard<std::mutex> lock(mutex);
  std::string name;
  auto calls = pending.find(point);
  if (calls != pending.end() && !calls->second.empty()) {
    name = std::move(calls->second.back().name);
    calls->second.pop_back();
  }
  if (!running) return;
  if (name.empty()) {
    // A point without an input point: its call is seen here only, where msprobe's entry takes
    // its place in dump.json anyway (an entry moves to the end when its output arrives).
    name = next_forward(prefix);
    enter(name);
  }
  if (forward && outputs && collects(name)) {
    // No "parameters": a point shows none of its module's tensors (docs/probe.md).
    Json fields = Json::object();
    fields["output"] = output_records(output, name);
    update(name, fields);
  }
  leave_point(name);
}

void DebuggerState::backward_begin(const std::string& name) {
  const std::lock_guard<std::mutex> lock(mutex);
  if (!running) return;
  enter(name);
}

void DebuggerState::backward_end(const std::string& name, const std::string& module_name,
                                 const TensorList& grad_input, const TensorList& grad_output) {
  const std::lock_guard<std::mutex> lock(mutex);
  if (!running) return;
  if (backward && collects(name)) {
    // msprobe's names: "input" holds the gradients of the module's outputs, "output" those of
    // its inputs.
    Json fields = Json::object();
    if (inputs) fields["input"] = grads_of(grad_output, name + ".input");
    if (outputs) fields["output"] = grads_of(grad_input, name + ".output");
    update(name, fields);
    backward_dumped[module_name] = true;
  }
  leave(name);
}

void DebuggerState::param_grad(const std::string& module_name, const std::string& param_name,
                               const at::Tensor& param, const at::Tensor& grad) {
  const std::lock_guard<std::mutex> lock(mutex);
  if (!running || !grad.defined()) return;
  auto [count, fresh] = grad_count.try_emplace(module_name + "." + param_name, 0);
  if (!fresh) ++count->second;
  const std::string name = module_name + ".parameters_grad." + std::to_string(count->second);
  if (!collects(module_name) && !backward_dumped[module_name]) {
    data.erase(name);
    return;
  }
  // This hook runs as the gradient reaches the parameter's accumulator; msprobe's runs after it
  // and reads `param.grad`, which is this gradient plus what `.grad` held.
  const at::NoGradGuard no_grad;
  const at::Tensor accumulated = param.grad().defined() ? param.grad() + grad : grad;
  Json fields = Json::object();
  fields[param_name] = Json::array({maker.tensor(accumulated, name + "." + param_name + ".pt")});
  update(name, fields);
}

namespace {
std::atomic<bool> debugger_alive{false};
}  // namespace

}  // namespace detail

PrecisionDebugger::PrecisionDebugger(const Config& config) {
  config.validate();
  if (detail::debugger_alive.exchange(true)) {
    modhooks::detail::fail<RuntimeError>(
        "probe.debugger.second",
        "modhooks: a PrecisionDebugger already exists in this process (one at a time, as "
        "msprobe's)");
  }
  state_ = std::make_shared<detail::DebuggerState>(config);
}

PrecisionDebugger::~PrecisionDebugger() {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->running = false;
    state_->remove_hooks();
  }
  // A tensor file that could not be written is raised by step(); destroyed before it, the
  // debugger says so rather than lose it.
  if (state_->writer) {
    if (const std::optional<std::string> failed = state_->writer->drain()) {
      TORCH_WARN("modhooks: could not write a tensor file: ", *failed,
                 " (the debugger was destroyed before a step() that would have raised it)");
    }
  }
  detail::debugger_alive = false;
}

namespace detail {
namespace {

/// What tells one module's calls apart: the torch::nn::Module, or a TorchScript module's
/// object (its `torch::jit::Module` handles are copies).
const void* identity(const torch::nn::Module& module) { return &module; }
const void* identity(const torch::jit::Module& module) { return module._ivalue().get(); }

NamedTensors own_parameters(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

NamedTensors own_parameters(const torch::jit::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    out.emplace_back(item.name, item.value);
  }
  return out;
}

torch::nn::Module& deref(const std::shared_ptr<torch::nn::Module>& module) { return *module; }
const torch::jit::Module& deref(const torch::jit::Module& module) { return module; }

/// Hooks one submodule where msprobe hooks it: its forward pre-hook after the module's own, its
/// forward hook before them, and a hook on each of its parameters that needs a gradient.
/// `Module` is the type the hooks receive (torch::nn::Module or torch::jit::Module).
template <class Module, class Ref>
void hook_module(const std::shared_ptr<DebuggerState>& shared, Ref module,
                 const std::string& prefix) {
  DebuggerState& state = *shared;
  std::weak_ptr<DebuggerState> weak = shared;
  state.handles.push_back(modhooks::register_forward_pre_hook(
      module,
      [weak, prefix](Module& m, const std::vector<c10::IValue>& args)
          -> std::optional<std::vector<c10::IValue>> {
        if (auto s = weak.lock()) return s->pre_hook(prefix, identity(m), args);
        return std::nullopt;
      }));
  state.handles.push_back(modhooks::register_forward_hook(
      module,
      [weak](Module& m, const std::vector<c10::IValue>& /*args*/,
             const c10::IValue& output) -> std::optional<c10::IValue> {
        if (auto s = weak.lock()) return s->forward_hook(identity(m), output, own_parameters(m));
        return std::nullopt;
      },
      ForwardHookOptions().prepend(true)));
  if (!state.backward) return;
  const std::string module_name = prefix.substr(0, prefix.size() - 1);
  for (const auto& [param_name, param] : own_parameters(deref(module))) {
    at::Tensor tensor = param;
    if (!tensor.requires_grad()) continue;
    // The hook holds the parameter weakly: a parameter holding itself would never die.
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> weak_param(
        tensor.getIntrusivePtr());
    const unsigned position = tensor.register_hook(
        [weak, module_name, name = param_name, weak_param](const at::Tensor& grad) {
          auto s = weak.lock();
          auto impl = weak_param.lock();
          if (s && impl) s->param_grad(module_name, name, at::Tensor(impl), grad);
        });
    state.param_hooks.push_back(DebuggerState::ParamHook{tensor, position});
  }
}

}  // namespace
}  // namespace detail

void PrecisionDebugger::start_nn(torch::nn::Module& model) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->begin_start()) return;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    detail::hook_module<torch::nn::Module>(
        state_, item.value(),
        "Module." + item.key() + "." + modhooks::detail::python_class_name(*item.value()) + ".");
  }
}

void PrecisionDebugger::start(const torch::jit::Module& model) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->begin_start()) return;
  for (const auto& item : model.named_modules()) {
    if (item.name.empty()) continue;  // the root, which msprobe does not dump either
    // The scripted class's plain name (`Linear`, `Block`): the qualified one carries the
    // compiler's mangle (`___torch_mangle_0`) and Python's module path.
    const std::string class_name = item.value.type()->name()->name();
    detail::hook_module<torch::jit::Module>(state_, item.value,
                                            "Module." + item.name + "." + class_name + ".");
  }
}

void PrecisionDebugger::start_points(const std::vector<detail::PointSite>& sites) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->begin_start()) return;
  const std::weak_ptr<detail::DebuggerState> weak = state_;
  for (const detail::PointSite& site : sites) {
    if (site.name.empty()) continue;  // the root's point, which msprobe does not dump either
    const std::string prefix = "Module." + site.name + "." + site.type_name + ".";
    if (site.has_inputs) {
      state_->handles.push_back(site.add_pre_hook(
          [weak, prefix](const void* point, const std::vector<c10::IValue>& args) {
            if (auto s = weak.lock()) s->point_input(prefix, point, args);
          }));
    }
    state_->handles.push_back(
        site.add_forward_hook([weak, prefix](const void* point, const c10::IValue& output) {
          if (auto s = weak.lock()) s->point_output(prefix, point, output);
        }));
  }
}

void PrecisionDebugger::stop() {
  auto& state = *state_;
  const std::lock_guard<std::mutex> lock(state.mutex);
  state.running = false;
  state.remove_hooks();
  state.pending.clear();
  state.flush();
}

void PrecisionDebugger::step() {
  auto& state = *state_;
  const std::lock_guard<std::mutex> lock(state.mutex);
  state.flush();
  // The step's tensor files are on disk, or the first that is not is named, before the next
  // step begins (a call again after that error goes on).
  if (state.writer) state.writer->wait();
  ++state.step;
  state.data = detail::Json::object();
  state.construct = detail::Json::object();
  state.forward_count.clear();
  state.grad_count.clear();
  state.backward_dumped.clear();
  state.stack.clear();
  state.in_scope = false;
  state.folder.clear();
  state.dirty = false;
  if (state.running) {
    // Still started: the next step records where it dumps.
    state.running = state.step_dumps();
    if (state.running) state.make_folder();
  }
}

}  // namespace probe
MODHOOKS_END_NAMESPACE
