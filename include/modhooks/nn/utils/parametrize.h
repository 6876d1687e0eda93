// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/nn/call.h"
#include "modhooks/nn/detail/identity.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::parametrize {

/// \addtogroup api_nn_utils
/// @{

/// One parametrization with its module's type erased: what `register_parametrization` keeps.
/// `make_parametrization` builds it from a module; the functions stand for the module's own.
struct Parametrization {
  /// The module (a child of the `ParametrizationList`, so its parameters and buffers are in
  /// the state dict as in Python: `parametrizations.weight.0._u`).
  std::shared_ptr<torch::nn::Module> module;
  /// The module's `forward` on the originals (one tensor each), run through `modhooks::call`
  /// as Python calls the module, so its own hooks fire.
  std::function<at::Tensor(const std::vector<at::Tensor>&)> forward;
  /// The module's `right_inverse`, or empty where it has none.
  std::function<std::vector<at::Tensor>(const at::Tensor&)> right_inverse;
  /// Whether `right_inverse` returns a sequence (a `std::vector`, `std::pair` or `std::tuple` of
  /// tensors) rather than one tensor: then the originals are `original0`, `original1`, ...
  bool right_inverse_is_sequence = false;
  /// The same parametrization on a copy of the module (its class's `clone`, which libtorch's
  /// `Cloneable` gives and a plain `torch::nn::Module` refuses): what a clone of the
  /// parametrized module gets.
  std::function<Parametrization()> copy;
};

/// Python's `ParametrizationList`: the originals of one parametrized tensor (the parameter or
/// buffer `original`, or `original0`, `original1`, ...) and the parametrizations `0`, `1`, ...
/// applied to them in turn. `register_parametrization` makes it and registers it as
/// `module.parametrizations.weight`.
class ParametrizationListImpl : public torch::nn::Module {
 public:
  /// Python's constructor: `original`'s data passes through the right inverse of the first
  /// parametrization (where it has one) and is registered as the original(s), a parameter when
  /// `original_is_parameter`, a buffer otherwise; unless `unsafe`, the result must keep
  /// `original`'s dtype and shape (ValueError with Python's texts).
  ParametrizationListImpl(Parametrization first, const at::Tensor& original,
                          bool original_is_parameter, bool unsafe);

  /// Python's `forward()`: the parametrized tensor.
  at::Tensor forward();
  /// Python's `right_inverse(value)` (what assigning `module.weight = value` runs): `value`
  /// passes back through every parametrization's right inverse into the originals, in place.
  /// Throws RuntimeError where one has none.
  void right_inverse(const at::Tensor& value);
  /// Appends a parametrization (Python's `append`); `register_parametrization` checks it.
  void append(Parametrization parametrization);

  /// The parametrization `index` (Python's `parametrizations.weight[index]`).
  const Parametrization& operator[](std::size_t index) const { return items_.at(index); }
  /// The number of parametrizations (Python's `len`).
  std::size_t size() const noexcept { return items_.size(); }
  /// Whether a single `original` holds the data (Python's `is_tensor`).
  bool is_tensor() const noexcept { return is_tensor_; }
  /// The number of originals (Python's `ntensors`).
  std::size_t ntensors() const noexcept { return ntensors_; }
  /// Python's `unsafe`: set when any parametrization was registered with it.
  bool unsafe = false;

 private:
  std::vector<at::Tensor> originals();

  std::vector<Parametrization> items_;
  bool is_tensor_ = true;
  std::size_t ntensors_ = 1;
};

namespace detail {

template <class T, class Seq, class = void>
struct TakesTensors : std::false_type {};
template <class T, std::size_t... I>
struct TakesTensors<
    T, std::index_sequence<I...>,
    std::void_t<decltype(std::declval<T&>().forward(((void)I, std::declval<at::Tensor>())...))>>
    : std::true_type {};

template <class T, class = void>
struct HasRightInverse : std::false_type {};
template <class T>
struct HasRightInverse<
    T, std::void_t<decltype(std::declval<T&>().right_inverse(std::declval<const at::Tensor&>()))>>
    : std::true_type {};

template <class R>
std::vector<at::Tensor> as_tensors(R&& result) {
  if constexpr (std::is_convertible_v<R, at::Tensor>) {
    return {at::Tensor(std::forward<R>(result))};
  } else if constexpr (std::is_convertible_v<R, std::vector<at::Tensor>>) {
    return std::vector<at::Tensor>(std::forward<R>(result));
  } else {
    return std::apply([](auto&&... item) { return std::vector<at::Tensor>{at::Tensor(item)...}; },
                      std::forward<R>(result));
  }
}

template <class T, std::size_t... I>
at::Tensor call_with(const std::shared_ptr<T>& module, const std::vector<at::Tensor>& xs,
                     std::index_sequence<I...>) {
  return modhooks::call(module, xs[I]...);
}

/// The forward of `T` on as many tensors as the originals are (one to four).
template <class T>
at::Tensor forward_on(const std::shared_ptr<T>& module, const std::vector<at::Tensor>& xs) {
  at::Tensor out;
  bool called = false;
  auto try_arity = [&](auto arity) {
    constexpr std::size_t kN = decltype(arity)::value;
    if constexpr (TakesTensors<T, std::make_index_sequence<kN>>::value) {
      if (!called && xs.size() == kN) {
        out = call_with(module, xs, std::make_index_sequence<kN>());
        called = true;
      }
    }
  };
  try_arity(std::integral_constant<std::size_t, 1>());
  try_arity(std::integral_constant<std::size_t, 2>());
  try_arity(std::integral_constant<std::size_t, 3>());
  try_arity(std::integral_constant<std::size_t, 4>());
  if (!called) {
    modhooks::detail::fail<TypeError>("nn.utils.parametrize.arity",
                                      modhooks::detail::python_class_name(*module) +
                                          ".forward() does not take " + std::to_string(xs.size()) +
                                          " tensor(s), the number of originals");
  }
  return out;
}

template <class T>
std::shared_ptr<T> owner_of(const std::shared_ptr<T>& module) {
  return module;
}
template <class T>
std::shared_ptr<T> owner_of(const torch::nn::ModuleHolder<T>& module) {
  return module.ptr();
}

void register_parametrization(torch::nn::Module& module, const std::string& name,
                              Parametrization parametrization, bool unsafe);
bool is_parametrized(const torch::nn::Module& module, const std::optional<std::string>& name);
void remove_parametrizations(torch::nn::Module& module, const std::string& name,
                             bool leave_parametrized);
std::shared_ptr<ParametrizationListImpl> parametrizations(const torch::nn::Module& module,
                                                          const std::string& name);

}  // namespace detail

/// A `Parametrization` from a module (a `ModuleHolder` such as a `TORCH_MODULE` type, or a
/// `std::shared_ptr` to a module) whose `forward` maps the originals (one tensor, or as many as
/// its `right_inverse` returns, up to four) to a tensor, and which may have a `right_inverse`.
template <class P>
Parametrization make_parametrization(const P& parametrization) {
  auto module = detail::owner_of(parametrization);
  using T = typename decltype(module)::element_type;
  static_assert(detail::TakesTensors<T, std::make_index_sequence<1>>::value ||
                    detail::TakesTensors<T, std::make_index_sequence<2>>::value ||
                    detail::TakesTensors<T, std::make_index_sequence<3>>::value ||
                    detail::TakesTensors<T, std::make_index_sequence<4>>::value,
                "a parametrization's forward takes one to four tensors");
  Parametrization made;
  made.module = module;
  made.forward = [module](const std::vector<at::Tensor>& xs) {
    return detail::forward_on(module, xs);
  };
  made.copy = [module] {
    const torch::nn::Module& base = *module;  // `clone` as the base declares it
    return make_parametrization(std::dynamic_pointer_cast<T>(base.clone()));
  };
  if constexpr (detail::HasRightInverse<T>::value) {
    using R = decltype(std::declval<T&>().right_inverse(std::declval<const at::Tensor&>()));
    made.right_inverse_is_sequence = !std::is_convertible_v<R, at::Tensor>;
    made.right_inverse = [module](const at::Tensor& value) {
      return detail::as_tensors(module->right_inverse(value));
    };
  }
  return made;
}

/// Python's `torch.nn.utils.parametrize.register_parametrization(module, name, p, unsafe=)`:
/// the parameter or buffer `name` moves to `module.parametrizations.weight.original` (for `name`
/// "weight") (through `p`'s `right_inverse`, where it has one), and the tensor `forward` reads
/// becomes `p` applied to it, recomputed before each forward through `modhooks::call`, a hook-aware
/// holder or `modhooks::Sequential` (Python recomputes it at each access; `fc->weight` holds the
/// value of the last forward). Registering on a parametrized tensor stacks `p` after the others.
/// Unless `unsafe`, `p` must keep the tensor's dtype and shape (ValueError with Python's texts).
///
/// **Example**:
/// \code
///   struct SymmetricImpl : torch::nn::Module {
///     at::Tensor forward(const at::Tensor& x) { return x.triu() + x.triu(1).transpose(0, 1); }
///   };
///   TORCH_MODULE(Symmetric);
///   torch::nn::Linear fc(3, 3);
///   modhooks::nn::utils::parametrize::register_parametrization(fc, "weight", Symmetric());
/// \endcode
template <class M, class P, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> register_parametrization(M&& module, const std::string& name,
                                                    const P& parametrization, bool unsafe = false) {
  detail::register_parametrization(modhooks::detail::module_ref(module), name,
                                   make_parametrization(parametrization), unsafe);
  return std::forward<M>(module);
}

/// Python's `is_parametrized(module, tensor_name=None)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
bool is_parametrized(const M& module, const std::optional<std::string>& name = std::nullopt) {
  return detail::is_parametrized(modhooks::detail::module_ref(module), name);
}

/// Python's `remove_parametrizations(module, name, leave_parametrized=True)`: `name` is a
/// parameter (or buffer) of the module again, holding the parametrized value (or, with
/// `leave_parametrized` false, the original). Throws ValueError where `name` is not
/// parametrized, and for `leave_parametrized` false on several originals.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> remove_parametrizations(M&& module, const std::string& name,
                                                   bool leave_parametrized = true) {
  detail::remove_parametrizations(modhooks::detail::module_ref(module), name, leave_parametrized);
  return std::forward<M>(module);
}

/// Python's `module.parametrizations[name]`, or null where `name` is not parametrized.
template <class M, modhooks::detail::IfNnModule<M> = 0>
std::shared_ptr<ParametrizationListImpl> parametrizations(const M& module,
                                                          const std::string& name) {
  return detail::parametrizations(modhooks::detail::module_ref(module), name);
}

/// Python's `with parametrize.cached():` on this thread: while one lives, each parametrized
/// tensor is computed once, at the first forward that needs it, and reused until the last
/// `Cached` of the thread ends.
class Cached {
 public:
  Cached();
  ~Cached();
  Cached(const Cached&) = delete;
  Cached& operator=(const Cached&) = delete;
};

/// @}

}  // namespace nn::utils::parametrize
MODHOOKS_END_NAMESPACE
