// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/string_view.h>

#include <atomic>
#include <cstddef>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/points/detail/point.h"
#include "modhooks/points/detail/program.h"
#include "modhooks/points/detail/replacement.h"
#include "modhooks/points/detail/shown.h"
#include "modhooks/points/detail/tensor_view.h"
#include "modhooks/version.h"

// The firing of the hook points of a compiled program, for every kind whose forward runs as a
// compiled graph (an AOTInductor package, an ExecuTorch program): each point runs the one hook
// sequence (`CallImpl`) in two halves, `enter` at its input point and `exit` at its output point,
// from the kernel of the point's operator on the thread that runs the program: the kernel asks
// `firing(name)` for the point, and where it gets one, calls `fire_input` or `fire_output` (a
// kernel inside a runtime that takes no exceptions calls `fire_over`). A kind supplies its
// program type `Program`, a `CompiledProgram` (modhooks/points/detail/program.h) that adds:
//
//   static const ProgramWords words;              // its errors' ids and names
//   std::size_t runners;                          // runs it serves at once
//   [[noreturn]] void refuse_reentrant_run() const;       // a hook ran it with no runner free
//
// `Points` checks these where it is instantiated (`ProgramContract`), each with its own message.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// How a hook point shows itself to the hook sequence (see `CallImpl`): the tensors the program
/// holds at the point, as aliases that stay valid where a hook keeps them; a replacement must
/// match what the compiled kernels after the point expect.
template <class P>
class PointCall {
 public:
  /// `ids`: the kind's ids of the errors of a replacement.
  PointCall(const P& point, const PointErrorIds& ids) : point_(point), ids_(ids) {}

  const HookArgs& args() const noexcept { return args_; }
  void replace_args(HookArgs&& args) { args_ = std::move(args); }
  void accept_args() {
    replaced_ =
        replacement(point_.name(), ids_, "args", c10::ivalue::Tuple::create(args_), graph_, false);
  }
  const HookArgs& forward_args() const noexcept { return args_; }
  ShownValue& output() noexcept { return output_; }
  void accept_output() {
    replaced_ =
        replacement(point_.name(), ids_, "output", output_.get(), graph_, point_.single_output());
  }
  /// The lists as a call starting now takes them: hooks changed them during this one.
  void snapshot_lists(CallSnapshots<const P>& fresh) const {
    fresh.global.take(global_hooks_if_any<const P>(), /*guarded=*/false);
    fresh.local.take(hooks_for(point_).get(), /*guarded=*/false);
  }

  /// Shows `shown` (aliases of the program's tensors `graph`) as the args.
  void show_args(const Aliases& shown, at::TensorList graph) {
    graph_ = graph;
    args_.assign(shown.begin(), shown.end());
  }
  /// Shows `shown` (aliases of `graph`) as the output: a tensor, or a tuple of them.
  void show_output(const Aliases& shown, at::TensorList graph) {
    graph_ = graph;
    if (point_.single_output()) {
      output_.borrow(shown[0]);
    } else {
      output_.replace(
          c10::ivalue::Tuple::create(std::vector<c10::IValue>(shown.begin(), shown.end())));
    }
  }
  /// What forward hooks and always-call hooks see as args from now on: the program may reuse
  /// the buffers of the point's inputs before its output point, so they get copies.
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

  /// The tensors a hook's replacement put in place of the program's; null where none did.
  const std::vector<at::Tensor>* replaced() const noexcept {
    return replaced_ ? &*replaced_ : nullptr;
  }
  void clear_replaced() noexcept { replaced_.reset(); }

 private:
  const P& point_;
  const PointErrorIds& ids_;
  at::TensorList graph_;
  HookArgs args_;
  ShownValue output_;
  std::optional<std::vector<at::Tensor>> replaced_;
};

template <class T, class = void>
struct HasPointType : std::false_type {};
template <class T>
struct HasPointType<T, std::void_t<typename T::PointType>> : std::true_type {};
template <class T, class = void>
struct HasProgramWords : std::false_type {};
template <class T>
struct HasProgramWords<T, std::void_t<decltype(T::words)>>
    : std::is_same<std::decay_t<decltype(T::words)>, ProgramWords> {};
template <class T, class = void>
struct HasRunners : std::false_type {};
template <class T>
struct HasRunners<T, std::void_t<decltype(std::declval<const T&>().runners)>>
    : std::is_convertible<decltype(std::declval<const T&>().runners), std::size_t> {};
template <class T, class = void>
struct HasReentrantRefusal : std::false_type {};
template <class T>
struct HasReentrantRefusal<T,
                           std::void_t<decltype(std::declval<const T&>().refuse_reentrant_run())>>
    : std::true_type {};

/// Checks that `Program` meets the contract of `Points` (see the top of this header), so that a
/// kind that misses a part gets a message naming it rather than an error deep in a template.
template <class Program>
constexpr bool meets_program_contract() {
  static_assert(HasPointType<Program>::value,
                "a compiled program derives from CompiledProgram<Program, Point>");
  if constexpr (HasPointType<Program>::value) {
    using P = typename Program::PointType;
    static_assert(std::is_base_of_v<CompiledProgram<Program, P>, Program>,
                  "a compiled program derives from CompiledProgram<Program, Point>");
    static_assert(std::is_base_of_v<PointBase<P>, P>,
                  "a compiled program's point class P derives from PointBase<P>");
    static_assert(is_point_kind<P>,
                  "a point kind's identity header declares "
                  "template <> struct KindTraits<const P> : PointKind {}");
  }
  static_assert(HasProgramWords<Program>::value,
                "a compiled program declares static const ProgramWords words");
  static_assert(HasRunners<Program>::value,
                "a compiled program says how many runs it serves at once: std::size_t runners");
  static_assert(HasReentrantRefusal<Program>::value,
                "a compiled program declares [[noreturn]] void refuse_reentrant_run() const");
  return true;
}

/// The firing of `Program`'s points on this thread (see the top of this header).
template <class Program>
class Points {
  static_assert(meets_program_contract<Program>());
  using P = typename Program::PointType;
  struct Run;
  struct OpenCall;

 public:
  /// One run of a program on this thread: while it lives, the point operators' kernels serve
  /// `program`'s points. Refuses a run where every runner of `program` already serves a run on
  /// this thread (a hook running its own program), which would wait forever.
  class RunScope {
   public:
    explicit RunScope(Program& program) {
      std::size_t serving = 0;
      for (const Run* r = current_; r != nullptr; r = r->outer) {
        serving += r->program == &program ? 1 : 0;
      }
      if (serving >= program.runners) program.refuse_reentrant_run();
      run_ = std::make_unique<Run>(
          Run{&program, current_, nullptr, {}, c10::InferenceMode::is_enabled()});
      current_ = run_.get();
    }
    ~RunScope() { current_ = run_->outer; }
    RunScope(const RunScope&) = delete;
    RunScope& operator=(const RunScope&) = delete;

    /// The program's run threw `e`: the always-call forward hooks of the points it had entered
    /// and not left run, innermost first, as Python's `_call_impl` of each enclosing module runs
    /// them; then what a hook threw is rethrown as itself, anything else goes to
    /// `Program::fail_run`.
    [[noreturn]] void fail(const std::exception& e) {
      while (!run_->open.empty()) {
        auto [point, open] = std::move(run_->open.back());
        run_->open.pop_back();
        open->sequence.failed(*point, open->call);
      }
      if (run_->error) std::rethrow_exception(run_->error);
      run_->program->fail_run(e);
    }

   private:
    std::unique_ptr<Run> run_;
  };

  /// The point `name` of the program this thread runs, where it may have something to do now
  /// (hooks of its own or global ones, or a call open): what a kernel passes to `fire_input` or
  /// `fire_output`. Null where it has nothing to do, so that a kernel makes no tensors over the
  /// program's memory for it.
  static const P* firing(c10::string_view name) {
    const Run* run = current_;
    const P* point = run ? run->program->find(std::string_view(name.data(), name.size())) : nullptr;
    return point && (!run->open.empty() || has_hooks(*point)) ? point : nullptr;
  }

  /// Records `error` as what ended this thread's run, where no hook's error came first.
  static void record_error(const std::exception_ptr& error) {
    if (current_ && !current_->error) current_->error = error;
  }

  /// The first half of a point's call (`CallImpl::enter`), at its input point: pre-hooks on
  /// `copies`, the copies of its inputs that the module reads, so that what they edit or replace
  /// reaches the module and no one else. A call that starts with hooks (its own or global ones)
  /// stays open until its output point, keeping copies of its args: forward hooks and
  /// always-call hooks may be registered until then, and see them (Python reads those lists after
  /// forward). One that starts with none is Python's fast exit: its output point runs no hook.
  /// What throws is recorded in the run, then rethrown.
  /// `point` comes from `firing`, in this thread's run.
  static void fire_input(const P& point, at::TensorList copies) {
    if (!has_hooks(point)) return;
    recording_errors([&] {
      auto open = std::make_unique<OpenCall>(point);
      if (open->sequence.empty()) return;
      Call& call = open->call;
      Aliases shown = shown_aliases(copies);
      run_keeping_valid(shown, copies, point.name(), ids().keep_failed, [&] {
        call.show_args(shown, copies);
        open->sequence.enter(point, call);
        call.hide_args();
      });
      write_replacement(copies, call.replaced());
      call.clear_replaced();
      call.keep_args(copies);
      current_->open.emplace_back(&point, std::move(open));
    });
  }

  /// The second half of a point's call (`CallImpl::exit`), at its output point. Hooks are shown
  /// `targets`, the tensors the program reads as the module's output after the point: what they
  /// write into them, in place or as a replacement, is the module's output, as in eager.
  /// A point with an input point whose call did not stay open took Python's fast exit there.
  /// `point` comes from `firing`, in this thread's run.
  static void fire_output(const P& point, at::TensorList targets) {
    std::unique_ptr<OpenCall> open = take_open(*current_, point);
    if (!open && (point.has_inputs() || !has_hooks(point))) return;
    recording_errors([&] {
      std::optional<OpenCall> unopened;  // no input point
      OpenCall& state = open ? *open : unopened.emplace(point);
      Call& call = state.call;
      Aliases shown = shown_aliases(targets);
      run_keeping_valid(shown, targets, point.name(), ids().keep_failed, [&] {
        call.show_output(shown, targets);
        state.sequence.exit(point, call);
        call.hide();
      });
      write_replacement(targets, call.replaced());
    });
  }

  /// Fires point `name` (its input point where `inputs`) on tensors over `views`, the point's
  /// tensors in memory of a runtime other than libtorch, on this thread's run: for a kernel
  /// inside a runtime that takes no exceptions (ExecuTorch's). Never throws: false where the run
  /// must end, its error recorded in the run.
  static bool fire_over(c10::string_view name, bool inputs, const TensorView* views,
                        std::size_t n) noexcept {
    const P* point = firing(name);
    if (!point) return true;
    try {
      Aliases targets = tensors_over(views, n, current_->inference);
      if (inputs) {
        fire_input(*point, targets);
      } else {
        fire_output(*point, targets);
      }
      give_back(targets);
      return true;
    } catch (...) {
      record_error(std::current_exception());
      return false;
    }
  }

 private:
  static const PointErrorIds& ids() { return Program::words.point; }
  using Call = PointCall<P>;

  /// One call of a point: its hooks' snapshots, its hook sequence and how it shows itself,
  /// taken at its input point (where it has one) and kept open until its output point.
  struct OpenCall {
    explicit OpenCall(const P& point)
        : snapshots(global_hooks_if_any<const P>(), hooks_for(point).get()),
          sequence(snapshots),
          call(point, ids()) {}
    CallSnapshots<const P> snapshots;
    CallImpl<const P> sequence;
    Call call;
  };

  /// One run on this thread: which program the kernels serve, what a hook threw, and the points
  /// entered at their input point and not left yet, innermost last.
  struct Run {
    Program* program;
    Run* outer;  // a run started by a hook of another run
    std::exception_ptr error;
    std::vector<std::pair<const P*, std::unique_ptr<OpenCall>>> open;
    // Whether it runs in inference mode, which a hook cannot change for the rest of the run (the
    // mode is set by scoped guards): the kind of tensor `fire_over` makes.
    bool inference;
  };

  static bool has_hooks(const P& point) {
    return !hooks_for(point)->empty() || any_global_hooks<const P>();
  }

  /// The call `point` entered at its input point, taken out of the open ones; null where none.
  static std::unique_ptr<OpenCall> take_open(Run& run, const P& point) {
    for (auto it = run.open.rbegin(); it != run.open.rend(); ++it) {
      if (it->first == &point) {
        std::unique_ptr<OpenCall> open = std::move(it->second);
        run.open.erase(std::next(it).base());
        return open;
      }
    }
    return nullptr;
  }

  /// Runs `body` and records what it throws in the run, so that the program's run rethrows that
  /// rather than the text the program's runtime turns it into.
  template <class F>
  static void recording_errors(F&& body) {
    try {
      body();
    } catch (...) {
      record_error(std::current_exception());
      throw;
    }
  }

  static inline thread_local Run* current_ = nullptr;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
