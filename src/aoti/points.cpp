// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>

#include "modhooks/core/error.h"
#include "modhooks/points/detail/firing.h"
#include "modhooks/points/detail/replacement.h"
#include "run.h"

// The hook-point operators' kernels: each fires the package's point through `Points`.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

using AotiPoints = Points<AotiModel>;

/// The in-place operator: the module's output is fresh, so hooks are shown it.
void output_point_inplace(at::TensorList xs, const at::Tensor& /*token*/, c10::string_view name) {
  if (const aoti::Point* point = AotiPoints::firing(name)) AotiPoints::fire_output(*point, xs);
}

/// The copying operator: the module's output aliases what others read (its input, a parameter),
/// so it is copied into `outs` first, and hooks are shown the copies; an edit in place never
/// reaches the aliased tensor.
void output_point_copying(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                          c10::string_view name) {
  write_copies(outs, xs);
  if (const aoti::Point* point = AotiPoints::firing(name)) AotiPoints::fire_output(*point, outs);
}

/// The input point: pre-hooks on the copies of the module's inputs.
void input_point(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                 c10::string_view name) {
  write_copies(outs, xs);
  if (const aoti::Point* point = AotiPoints::firing(name)) AotiPoints::fire_input(*point, outs);
}

}  // namespace

const ProgramWords AotiModel::words{
    "aoti::Model",
    "aoti.model.moved_from",
    "aoti.model.no_point",
    "modhooks.export",
    "aoti.model.run_failed",
    {"aoti.point.keep_failed", "aoti.hook.bad_replacement", "aoti.hook.replacement_mismatch"}};

void AotiModel::refuse_reentrant_run() const {
  fail<RuntimeError>("aoti.model.reentrant_run",
                     "modhooks: a hook ran " + path + " again while its " +
                         std::to_string(runners) +
                         " runner(s) serve runs on this thread, so the run would wait forever; "
                         "load the Model with more runners (num_runners) or run another Model");
}

}  // namespace detail
MODHOOKS_END_NAMESPACE

// The hook-point operators, with the schemas python/modhooks/_ops.py declares for export. In
// the unit of `AotiModel::refuse_reentrant_run`, which `Model::run` needs, so that a static
// libmodhooks_aoti keeps this registration wherever a program runs a package.
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
