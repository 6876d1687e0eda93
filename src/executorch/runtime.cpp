// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "runtime.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr_maker.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstring>
#include <unordered_set>
#include <utility>

#include "modhooks/core/error.h"

// ExecuTorch's side of the component: loading a program, running its `forward`, and the kernel
// of the hook-point operator `modhooks::point.out` (python/modhooks/_ops.py).

namespace et = ::executorch::runtime;
namespace etx = ::executorch::extension;
using EtTensor = ::executorch::aten::Tensor;

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

TensorView view_of(const EtTensor& t) {
  TensorView view;
  view.data = t.mutable_data_ptr();
  view.dtype = static_cast<std::int8_t>(t.scalar_type());
  view.dim = static_cast<std::size_t>(t.dim());
  for (std::size_t d = 0; d < view.dim; ++d) view.sizes[d] = t.size(static_cast<ssize_t>(d));
  return view;
}

bool same_dim_order(const EtTensor& a, const EtTensor& b) {
  auto x = a.dim_order();
  auto y = b.dim_order();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

/// `modhooks::point.out(Tensor[] xs, str name, bool inputs, *, Tensor(a!)[] out) -> ()`: copies
/// `xs` into the planned `out`, then fires the point on `out`, which the program reads from
/// then on. Fails the run (never throws, inside ExecuTorch) where the program does not match
/// the operator or the point's hooks end the run.
void point_kernel(et::KernelRuntimeContext& context, et::Span<et::EValue*> stack) {
  if (stack.size() < 4 || !stack[0]->isTensorList() || !stack[1]->isString() ||
      !stack[2]->isBool() || !stack[3]->isTensorList()) {
    context.fail(et::Error::InvalidProgram);
    return;
  }
  auto xs = stack[0]->toTensorList();
  auto outs = stack[3]->toTensorList();
  if (xs.size() != outs.size() || xs.size() > 64) {
    context.fail(et::Error::InvalidProgram);
    return;
  }
  // Reused by every firing on this thread; `fire_point` reads it before any hook runs, so a
  // hook's run of another program may refill it.
  thread_local std::vector<TensorView> views;
  views.clear();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const EtTensor& x = xs[i];
    EtTensor out = outs[i];
    if (x.scalar_type() != out.scalar_type() || !same_dim_order(x, out) ||
        et::resize_tensor(out, x.sizes()) != et::Error::Ok) {
      context.fail(et::Error::InvalidProgram);
      return;
    }
    if (x.nbytes() > 0) std::memcpy(out.mutable_data_ptr(), x.const_data_ptr(), x.nbytes());
    views.push_back(view_of(out));
  }
  const std::string_view name = stack[1]->toString();
  if (!fire_point(name, stack[2]->toBool(), views.data(), views.size())) {
    context.fail(et::Error::Internal);
  }
}

/// Registers `point_kernel` once per process, before a program's method is loaded (ExecuTorch
/// resolves a method's kernels then).
void register_point_kernel() {
  static const et::Error registered = [] {
    et::runtime_init();
    static const et::Kernel kernel("modhooks::point.out", point_kernel);
    return et::register_kernel(kernel);
  }();
  if (registered != et::Error::Ok) {
    fail<RuntimeError>("executorch.kernel.unregistered",
                       std::string("modhooks: ExecuTorch refused the hook-point kernel "
                                   "modhooks::point.out: ") +
                           et::to_string(registered));
  }
}

}  // namespace

struct EtRuntime::Impl {
  explicit Impl(const std::string& path) : module(path, etx::Module::LoadMode::File) {}
  etx::Module module;
  std::vector<int> input_dtypes;
};

EtRuntime::EtRuntime(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  register_point_kernel();
  auto unloadable = [&](const char* what, et::Error error) {
    fail<FormatError>("executorch.program.unloadable", "modhooks: ExecuTorch cannot load " +
                                                           std::string(what) + path + ": " +
                                                           et::to_string(error));
  };
  // Checked whole: the file may be anything.
  if (et::Error e = impl_->module.load(et::Program::Verification::InternalConsistency);
      e != et::Error::Ok) {
    unloadable("the program ", e);
  }
  if (et::Error e = impl_->module.load_method("forward"); e != et::Error::Ok) {
    unloadable("the method forward of ", e);
  }
  auto meta = impl_->module.method_meta("forward");
  if (!meta.ok()) unloadable("the method forward of ", meta.error());
  for (std::size_t i = 0; i < meta->num_inputs(); ++i) {
    auto tag = meta->input_tag(i);
    auto info = meta->input_tensor_meta(i);
    impl_->input_dtypes.push_back(tag.ok() && *tag == et::Tag::Tensor && info.ok()
                                      ? static_cast<int>(info->scalar_type())
                                      : -1);
  }
}

EtRuntime::~EtRuntime() = default;

std::optional<std::string> EtRuntime::string_constant(const char* method, const char* bad_id) {
  auto names = impl_->module.method_names();
  if (!names.ok() || names->count(method) == 0) return std::nullopt;
  auto result = impl_->module.execute(method);
  if (!result.ok() || result->size() != 1 || !(*result)[0].isString()) {
    fail<FormatError>(bad_id, std::string("modhooks: the constant method ") + method +
                                  " of this program does not return a string");
  }
  std::string value((*result)[0].toString());
  impl_->module.unload_method(method);
  return value;
}

const std::vector<int>& EtRuntime::input_dtypes() const noexcept { return impl_->input_dtypes; }

std::string EtRuntime::run(const std::vector<TensorView>& inputs,
                           std::vector<TensorView>& outputs) {
  std::vector<etx::TensorPtr> tensors;
  std::vector<et::EValue> values;
  for (const TensorView& v : inputs) {
    std::vector<::executorch::aten::SizesType> sizes(v.sizes.begin(), v.sizes.begin() + v.dim);
    tensors.push_back(etx::from_blob(v.data, std::move(sizes),
                                     static_cast<::executorch::aten::ScalarType>(v.dtype)));
    values.emplace_back(*tensors.back());
  }
  auto result = impl_->module.forward(values);
  if (!result.ok()) return std::string("ExecuTorch's error ") + et::to_string(result.error());
  outputs.clear();
  for (std::size_t i = 0; i < result->size(); ++i) {
    const et::EValue& value = (*result)[i];
    if (!value.isTensor()) {
      return "output " + std::to_string(i) + " is not a tensor (ExecuTorch's tag " +
             std::to_string(static_cast<int>(value.tag)) + ")";
    }
    outputs.push_back(view_of(value.toTensor()));
  }
  return {};
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
