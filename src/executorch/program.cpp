// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/executorch/program.h"

#include <ATen/ATen.h>

#include <exception>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/global_tables.h"
#include "modhooks/points/detail/firing.h"
#include "program.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// The constant methods that modhooks.export.to_executorch writes (python/modhooks/export.py).
constexpr const char* kAbiMethod = "modhooks_abi";
constexpr const char* kPointsMethod = "modhooks_points";

/// Where `path` cannot be opened, a clearer error than the runtime's.
const std::string& readable(const std::string& path) {
  if (!std::ifstream(path, std::ios::binary)) {
    fail<RuntimeError>("executorch.program.open_failed",
                       "modhooks: cannot open the ExecuTorch program " + path);
  }
  return path;
}

TensorView view_of(const at::Tensor& t) {
  TensorView view;
  view.data = t.data_ptr();
  view.dtype = static_cast<std::int8_t>(t.scalar_type());
  view.dim = static_cast<std::size_t>(t.dim());
  for (std::size_t d = 0; d < view.dim; ++d) view.sizes[d] = t.size(static_cast<int64_t>(d));
  return view;
}

}  // namespace

EtProgram::EtProgram(std::string path_)
    : CompiledProgram(std::move(path_)), runtime(readable(path)) {
  const char* bad = "executorch.program.bad_points";
  std::optional<std::string> abi = runtime.string_constant(kAbiMethod, bad);
  if (!abi) return;  // exported without modhooks' points
  check_point_abi(*abi, path, "executorch.program.abi_mismatch");
  std::optional<std::string> table = runtime.string_constant(kPointsMethod, bad);
  read_points(table.value_or("[]"), bad);
}

const ProgramWords EtProgram::words{
    "executorch::Program",
    "executorch.program.moved_from",
    "executorch.program.no_point",
    "modhooks.export with backend='executorch'",
    "executorch.program.run_failed",
    {"executorch.point.keep_failed", "executorch.hook.bad_replacement",
     "executorch.hook.replacement_mismatch"}};

void EtProgram::refuse_reentrant_run() const {
  fail<RuntimeError>("executorch.program.reentrant_run",
                     "modhooks: a hook ran " + path +
                         " again while it runs on this thread; an ExecuTorch program runs one "
                         "call at a time, so run another Program");
}

bool fire_point(std::string_view name, bool inputs, const TensorView* views,
                std::size_t n) noexcept {
  return Points<EtProgram>::fire_over(c10::string_view(name.data(), name.size()), inputs, views, n);
}

}  // namespace detail

namespace executorch {

Program::Program(const std::string& path)
    : ProgramHandle(std::make_unique<modhooks::detail::EtProgram>(path)) {}

std::vector<at::Tensor> Program::run(const std::vector<at::Tensor>& inputs) {
  modhooks::detail::EtProgram& program = live();
  const std::vector<int>& dtypes = program.runtime.input_dtypes();
  auto bad_inputs = [&](const std::string& why) {
    modhooks::detail::fail<ValueError>(
        "executorch.program.bad_inputs",
        "modhooks: " + program.path + " cannot run on these " + "inputs: " + why);
  };
  if (inputs.size() != dtypes.size()) {
    bad_inputs("it takes " + std::to_string(dtypes.size()) + " input(s), got " +
               std::to_string(inputs.size()));
  }
  std::vector<at::Tensor> held;  // contiguous CPU tensors, alive while the program reads them
  std::vector<modhooks::detail::TensorView> views;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined() || !t.device().is_cpu() || t.dim() > 16 ||
        static_cast<int>(t.scalar_type()) != dtypes[i]) {
      bad_inputs("input " + std::to_string(i) + " is " +
                 (t.defined()
                      ? std::string(c10::toString(t.scalar_type())) + " on " + t.device().str()
                      : std::string("undefined")) +
                 "; the program takes a CPU tensor of dtype " +
                 (dtypes[i] < 0 ? std::string("(not a tensor)")
                                : c10::toString(static_cast<at::ScalarType>(dtypes[i]))));
    }
    held.push_back(t.contiguous());
    views.push_back(modhooks::detail::view_of(held.back()));
  }
  modhooks::detail::Points<modhooks::detail::EtProgram>::RunScope scope(program);
  std::lock_guard<std::mutex> lock(program.running);
  std::vector<modhooks::detail::TensorView> outputs;
  std::string error = program.runtime.run(views, outputs);
  if (!error.empty()) scope.fail(std::runtime_error(error));
  // The outputs live in the program's planned memory, which the next run writes over.
  std::vector<at::Tensor> results;
  results.reserve(outputs.size());
  for (const auto& v : outputs) {
    results.push_back(at::from_blob(v.data, at::IntArrayRef(v.sizes.data(), v.dim),
                                    at::TensorOptions().dtype(static_cast<at::ScalarType>(v.dtype)))
                          .clone());
  }
  return results;
}

}  // namespace executorch
MODHOOKS_END_NAMESPACE

template class modhooks::detail::ProgramHandle<modhooks::detail::EtProgram,
                                               modhooks::executorch::Point>;

// The global lists of this kind (global_tables.h).
template struct modhooks::detail::GlobalHooks<const modhooks::executorch::Point>;
