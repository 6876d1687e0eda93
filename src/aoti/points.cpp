// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aliases.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"
#include "replacement.h"
#include "run.h"

// The hook-point operators' kernels: each point of a package runs the one hook sequence
// (`Dispatch`) in two halves, `enter` at its input point and `exit` at its output point.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

// `PointCall` and `PointRun` have external linkage (in `detail`) because `Run`, declared in
// run.h, holds them: GCC's -Wsubobject-linkage refuses a field of an anonymous-namespace type.

/// How a hook point shows itself to the hook sequence (see `Dispatch`): the tensors the graph
/// holds at the point, as aliases that stay valid where a hook keeps them; a replacement must
/// match what the compiled kernels after the point expect.
class PointCall {
 public:
  explicit PointCall(const aoti::Point& point) : point_(point) {}

  const HookArgs& args() const noexcept { return args_; }
  void replace_args(HookArgs&& args) { args_ = std::move(args); }
  void accept_args() {
    replaced_ = replacement(point_, "args", c10::ivalue::Tuple::create(args_), graph_, false);
  }
  const HookArgs& forward_args() const noexcept { return args_; }
  ShownValue& output() noexcept { return output_; }
  void accept_output() {
    replaced_ = replacement(point_, "output", output_.get(), graph_, point_.single_output());
  }

  /// Shows `shown` (aliases of the graph's tensors `graph`) as the args.
  void show_args(const Shown& shown, at::TensorList graph) {
    graph_ = graph;
    args_.assign(shown.begin(), shown.end());
  }
  /// Shows `shown` (aliases of `graph`) as the output: a tensor, or a tuple of them.
  void show_output(const Shown& shown, at::TensorList graph) {
    graph_ = graph;
    if (point_.single_output()) {
      output_.borrow(shown[0]);
    } else {
      output_.replace(
          c10::ivalue::Tuple::create(std::vector<c10::IValue>(shown.begin(), shown.end())));
    }
  }
  /// What forward hooks and always-call hooks see as args from now on: the graph may reuse the
  /// buffers of the point's inputs before its output point, so they get copies.
  void keep_args(at::TensorList inputs) {
    args_.clear();
    for (const auto& t : inputs) args_.emplace_back(t.clone());
  }
  /// Lets go of what was shown, so that `keep_valid` finds the aliases no hook kept unshared.
  void hide() {
    output_.replace(c10::IValue());
    graph_ = {};
  }
  void hide_args() { args_.clear(); }

  /// The tensors a hook's replacement put in place of the graph's; null where none did.
  const std::vector<at::Tensor>* replaced() const noexcept {
    return replaced_ ? &*replaced_ : nullptr;
  }
  void clear_replaced() noexcept { replaced_.reset(); }

 private:
  const aoti::Point& point_;
  at::TensorList graph_;
  HookArgs args_;
  ShownValue output_;
  std::optional<std::vector<at::Tensor>> replaced_;
};

namespace {

const PointHooks* global_point_hooks() {
  return global_hooks_active<const aoti::Point>().load(std::memory_order_relaxed) != 0
             ? global_hooks<const aoti::Point>().get()
             : nullptr;
}

}  // namespace

/// One call of a point: its hooks' snapshots, taken at its input point (where it has one) and
/// kept open until its output point.
struct PointRun {
  explicit PointRun(const aoti::Point& point)
      : dispatch(global_point_hooks(), hooks_for(point).get()), call(point) {}
  Dispatch<const aoti::Point> dispatch;
  PointCall call;
};

/// One `Model::run` on this thread: which model the operators' kernels serve, what a hook threw,
/// and the points entered at their input point and not left yet, innermost last.
struct Run {
  AotiModel* model;
  Run* outer;  // a run started by a hook of another run
  std::exception_ptr error;
  std::vector<std::pair<const aoti::Point*, std::unique_ptr<PointRun>>> open;
};

namespace {

thread_local Run* current_run = nullptr;

/// The point `name` of the model this thread runs; null outside a run.
const aoti::Point* point_of(c10::string_view name, const Run* run) {
  return run ? run->model->find(std::string_view(name.data(), name.size())) : nullptr;
}

bool has_hooks(const aoti::Point& point) {
  return !hooks_for(point)->empty() ||
         global_hooks_active<const aoti::Point>().load(std::memory_order_relaxed) != 0;
}

/// The call `point` entered at its input point, taken out of the open ones; null where none.
std::unique_ptr<PointRun> take_open(Run& run, const aoti::Point& point) {
  for (auto it = run.open.rbegin(); it != run.open.rend(); ++it) {
    if (it->first == &point) {
      std::unique_ptr<PointRun> open = std::move(it->second);
      run.open.erase(std::next(it).base());
      return open;
    }
  }
  return nullptr;
}

/// Runs `body` and records what it throws in the run, so that `Model::run` rethrows that
/// rather than the text AOTInductor's C interface turns it into.
template <class F>
decltype(auto) recording_errors(Run* run, F&& body) {
  try {
    return body();
  } catch (...) {
    if (run && !run->error) run->error = std::current_exception();
    throw;
  }
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.storage().data());
  const auto* b0 = static_cast<const char*>(b.storage().data());
  return a0 < b0 + b.storage().nbytes() && b0 < a0 + a.storage().nbytes();
}

/// Writes `xs` into `outs`, the new tensors the graph allocated for the copying operators.
void write_copies(at::TensorList outs, at::TensorList xs) {
  for (std::size_t i = 0; i < outs.size(); ++i) const_cast<at::Tensor&>(outs[i]).copy_(xs[i]);
}

/// Writes a hook's replacement `values`, if any, into `targets`, the tensors the graph reads
/// after the point (a replacement may itself be a view of them).
void write_replacement(at::TensorList targets, const std::vector<at::Tensor>* values) {
  if (!values) return;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    at::Tensor value = (*values)[i];
    if (overlaps(value, targets[i])) value = value.clone();
    const_cast<at::Tensor&>(targets[i]).copy_(value);
  }
}

/// The second half of a point's call at its output point (`Dispatch::exit`), `open` where its
/// input point opened it. Hooks are shown `targets`, the tensors the graph reads as the module's
/// output after the point: what they write into them, in place or as a replacement, is the
/// module's output, as in eager.
void fire_output(const aoti::Point& point, std::unique_ptr<PointRun> open, at::TensorList targets) {
  std::optional<PointRun> unopened;  // a point without inputs, or whose input point had no hooks
  PointRun& run = open ? *open : unopened.emplace(point);
  Shown shown = shown_aliases(targets);
  run_keeping_valid(shown, targets, point.name(), [&] {
    run.call.show_output(shown, targets);
    run.dispatch.exit(point, run.call);
    run.call.hide();
  });
  write_replacement(targets, run.call.replaced());
}

/// The in-place operator: the module's output is fresh, so hooks are shown it.
void output_point_inplace(at::TensorList xs, const at::Tensor& /*token*/, c10::string_view name) {
  Run* run = current_run;
  const aoti::Point* point = point_of(name, run);
  if (!point) return;
  std::unique_ptr<PointRun> open = take_open(*run, *point);
  if (!open && !has_hooks(*point)) return;
  recording_errors(run, [&] { fire_output(*point, std::move(open), xs); });
}

/// The copying operator: the module's output aliases what others read (its input, a parameter),
/// so it is copied into `outs` first, and hooks are shown the copies; an edit in place never
/// reaches the aliased tensor.
void output_point_copying(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                          c10::string_view name) {
  write_copies(outs, xs);
  Run* run = current_run;
  const aoti::Point* point = point_of(name, run);
  std::unique_ptr<PointRun> open = point ? take_open(*run, *point) : nullptr;
  if (!open && (!point || !has_hooks(*point))) return;
  recording_errors(run, [&] { fire_output(*point, std::move(open), outs); });
}

/// The first half of a point's call (`Dispatch::enter`): pre-hooks on the copies of its inputs
/// that the module reads, so that what they edit or replace reaches the module and no one else.
/// A call whose point has forward hooks stays open until its output point.
void input_point(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                 c10::string_view name) {
  write_copies(outs, xs);
  Run* run = current_run;
  const aoti::Point* point = point_of(name, run);
  if (!point || !has_hooks(*point)) return;
  recording_errors(run, [&] {
    auto open = std::make_unique<PointRun>(*point);
    PointCall& call = open->call;
    Shown shown = shown_aliases(outs);
    run_keeping_valid(shown, outs, point->name(), [&] {
      call.show_args(shown, outs);
      open->dispatch.enter(*point, call);
      call.hide_args();
    });
    write_replacement(outs, call.replaced());
    call.clear_replaced();
    if (open->dispatch.has_forward_hooks()) {
      call.keep_args(outs);
      run->open.emplace_back(point, std::move(open));
    }
  });
}

}  // namespace

RunScope::RunScope(AotiModel& model) {
  std::size_t serving = 0;  // this model's runs under way on this thread, each holding a runner
  for (const Run* r = current_run; r != nullptr; r = r->outer) {
    serving += r->model == &model ? 1 : 0;
  }
  if (serving >= model.runners) {
    detail::fail<RuntimeError>(
        "aoti.model.reentrant_run",
        "modhooks: a hook ran " + model.path + " again while its " + std::to_string(model.runners) +
            " runner(s) serve runs on this thread, so the run would wait forever; load the "
            "Model with more runners (num_runners) or run another Model");
  }
  run_ = std::make_unique<Run>(Run{&model, current_run, nullptr, {}});
  current_run = run_.get();
}

RunScope::~RunScope() { current_run = run_->outer; }

void RunScope::fail(const std::exception& e) {
  while (!run_->open.empty()) {
    auto [point, open] = std::move(run_->open.back());
    run_->open.pop_back();
    open->dispatch.failed(*point, open->call);
  }
  if (run_->error) std::rethrow_exception(run_->error);
  detail::fail<RuntimeError>("aoti.model.run_failed",
                             "modhooks: running " + run_->model->path + " failed: " + e.what());
}

}  // namespace detail
MODHOOKS_END_NAMESPACE

// The hook-point operators, with the schemas python/modhooks/_ops.py declares for export. In
// the unit of `RunScope`, which `Model::run` needs, so that a static libmodhooks_aoti keeps this
// registration wherever a program runs a package.
TORCH_LIBRARY(modhooks, m) {
  m.def("output_point_(Tensor(a!)[] xs, Tensor(b!) token, str name) -> ()");
  m.def("output_point(Tensor[] xs, Tensor(a!)[] outs, Tensor(b!) token, str name) -> ()");
  m.def("input_point(Tensor[] xs, Tensor(a!)[] outs, Tensor(b!) token, str name) -> ()");
  m.impl("output_point_", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::output_point_inplace));
  m.impl("output_point", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::output_point_copying));
  m.impl("input_point", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::input_point));
}
