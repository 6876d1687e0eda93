// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <c10/util/Exception.h>
#include <c10/util/Type.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/nn/call.h"

namespace modhooks {
namespace detail {

/// An adapter that `torch::nn::AnyModule` can type-erase: its `forward` has the child's
/// signature and runs the child through `call`. It registers nothing, so parameter names stay
/// those of the child.
template <class T, class Forward = decltype(&T::forward)>
struct HookedForward;

template <class T, class R, class... A>
struct HookedForward<T, R (T::*)(A...)> : torch::nn::Module {
  explicit HookedForward(std::shared_ptr<T> child) : child(std::move(child)) {}
  R forward(A... args) { return modhooks::call(child, std::forward<A>(args)...); }
  std::shared_ptr<T> child;
};

template <class T>
std::shared_ptr<T> shared_module(const std::shared_ptr<T>& module) {
  return module;
}
template <class T>
std::shared_ptr<T> shared_module(const torch::nn::ModuleHolder<T>& module) {
  return module.ptr();
}

}  // namespace detail

/// A hook-aware `torch::nn::Sequential`: built the same way, but its `forward` runs every child
/// through `modhooks::call`, so the children's hooks fire. Children are registered under "0",
/// "1", ... (or the given names), so parameter names match libtorch's and Python's.
class SequentialImpl : public torch::nn::Module {
 public:
  SequentialImpl() = default;

  template <class... Modules>
  explicit SequentialImpl(Modules&&... modules) {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  /// Appends a `ModuleHolder` (e.g. `torch::nn::Linear`) or a `shared_ptr` to a module.
  template <class M>
  void push_back(M&& module) {
    push_back(std::to_string(children_.size()), std::forward<M>(module));
  }

  template <class M>
  void push_back(std::string name, M&& module) {
    auto child = detail::shared_module(module);
    using T = typename decltype(child)::element_type;
    register_module(std::move(name), child);
    children_.push_back(child);
    forwards_.emplace_back(std::make_shared<detail::HookedForward<T>>(std::move(child)));
  }

  /// Runs the children in order, each through `call`; the first receives `inputs`.
  template <class Return = at::Tensor, class... Inputs>
  Return forward(Inputs&&... inputs) {
    TORCH_CHECK(!forwards_.empty(), "Cannot call forward() on an empty Sequential");
    auto it = forwards_.begin();
    torch::nn::AnyValue value = it->any_forward(std::forward<Inputs>(inputs)...);
    for (++it; it != forwards_.end(); ++it) value = it->any_forward(std::move(value));
    auto* result = value.template try_get<Return>();
    TORCH_CHECK(result, "The type of the return value is ", c10::demangle(value.type_info().name()),
                ", but you asked for type ", c10::demangle_type<Return>());
    return std::move(*result);
  }

  /// Child `index`, as libtorch's `Sequential::ptr(index)`.
  std::shared_ptr<torch::nn::Module> ptr(std::size_t index) const { return children_.at(index); }

  std::size_t size() const noexcept { return children_.size(); }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> children_;
  std::vector<torch::nn::AnyModule> forwards_;
};

TORCH_MODULE(Sequential);

}  // namespace modhooks
