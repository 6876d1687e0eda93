// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/jit/call.h"

#include <c10/util/Exception.h>

#include <memory>
#include <utility>

#include "modhooks/nn/dispatch.h"

namespace modhooks {
namespace detail {
namespace {

/// Routes the top-level tensors among `values` through one side of `hook`, in place.
void wrap_values(BackwardHookBase& hook, std::vector<c10::IValue>& values, bool output_side) {
  TensorList tensors;
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].isTensor() && values[i].toTensor().defined()) {
      tensors.push_back(values[i].toTensor());
      positions.push_back(i);
    }
  }
  TensorList wrapped = output_side ? hook.setup_output(tensors, positions, values.size())
                                   : hook.setup_input(tensors, positions, values.size());
  for (std::size_t k = 0; k < positions.size(); ++k) values[positions[k]] = wrapped[k];
}

/// A Tensor output counts as a 1-tuple; any other non-tuple gets Python's warning, no hooks.
void wrap_script_output(BackwardHookBase& hook, c10::IValue& output) {
  if (output.isTensor()) {
    std::vector<c10::IValue> single{output};
    wrap_values(hook, single, /*output_side=*/true);
    output = single[0];
  } else if (output.isTuple()) {
    std::vector<c10::IValue> elements = output.toTupleRef().elements().vec();
    wrap_values(hook, elements, /*output_side=*/true);
    output = c10::ivalue::Tuple::create(std::move(elements));
  } else {
    TORCH_WARN(
        "For backward hooks to be called, module output should be a Tensor or a tuple of "
        "Tensors but received ",
        output.tagKind());
  }
}

}  // namespace

c10::IValue call_with_hooks(torch::jit::Module& module, std::vector<c10::IValue> inputs) {
  Dispatch<torch::jit::Module> dispatch(nullptr, find_hooks(module));
  if (dispatch.empty()) return module.forward(std::move(inputs));
  auto backward_hook = dispatch.backward_hook(module, std::make_shared<torch::jit::Module>(module));
  c10::IValue output;
  try {
    dispatch.run_pre_hooks(module, inputs);
    if (backward_hook) wrap_values(*backward_hook, inputs, /*output_side=*/false);
    output = module.forward(inputs);
    dispatch.run_forward_hooks(module, inputs, output);
    if (backward_hook) wrap_script_output(*backward_hook, output);
  } catch (...) {
    dispatch.run_always_called(module, inputs, output);
    throw;
  }
  return output;
}

}  // namespace detail
}  // namespace modhooks
