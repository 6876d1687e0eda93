// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "modhooks/nn/detail/identity.h"
#include "modhooks/nn/utils/detail/tensors.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::prune {

/// \addtogroup api_nn_utils
/// @{

/// How much to prune, as Python's `amount`: a fraction of the tensor (a floating-point value in
/// [0, 1]) or a number of entries (an integer, at least 0). An integer literal is a count, as in
/// Python: `3` prunes three entries, `0.3` thirty per cent.
class Amount {
 public:
  /// A fraction; ValueError outside [0, 1].
  Amount(double fraction);  // NOLINT(google-explicit-constructor): Python passes a number
  /// A count; ValueError when negative.
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Amount(I count) : Amount(static_cast<std::int64_t>(count), CountTag{}) {}  // NOLINT
  /// Python's `_compute_nparams_toprune`: the count, or round(fraction * size) (to even, as
  /// Python's `round`).
  std::int64_t of(std::int64_t size) const;
  /// Python's `_validate_pruning_amount`: ValueError when a count exceeds `size`.
  void check(std::int64_t size) const;
  /// How Python prints it in error texts (`0.3`, `3`).
  std::string str() const;

 private:
  struct CountTag {};
  Amount(std::int64_t count, CountTag);
  std::variant<double, std::int64_t> value_;
};

/// Python's `PRUNING_TYPE`.
enum class PruningType { kUnstructured, kStructured, kGlobal };

/// Python's `BasePruningMethod`: a rule that computes a mask. The module functions below
/// apply one to a module's tensor.
class BasePruningMethod {
 public:
  virtual ~BasePruningMethod() = default;
  /// Python's `PRUNING_TYPE`: which entries a combined pruning passes to this method.
  virtual PruningType pruning_type() const = 0;
  /// Python's `compute_mask(t, default_mask)`: `default_mask` with more entries set to 0.
  virtual at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const = 0;
  /// The dimension a structured method prunes along (Python's `dim`).
  virtual std::optional<std::int64_t> dim() const { return std::nullopt; }
  /// Python's `prune(t, default_mask=None, importance_scores=None)`: `t` times the mask
  /// computed on `importance_scores` (or `t`).
  at::Tensor prune(const at::Tensor& t, const at::Tensor& default_mask = {},
                   const at::Tensor& importance_scores = {}) const;
};

/// Python's `Identity`: keeps every entry.
class IdentityMethod final : public BasePruningMethod {
 public:
  PruningType pruning_type() const override { return PruningType::kUnstructured; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;
};

/// Python's `RandomUnstructured(amount)`: entries chosen at random (the default generator).
class RandomUnstructuredMethod final : public BasePruningMethod {
 public:
  /// Python's `RandomUnstructured(amount)`.
  explicit RandomUnstructuredMethod(Amount amount) : amount_(amount) {}
  PruningType pruning_type() const override { return PruningType::kUnstructured; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  Amount amount_;
};

/// Python's `L1Unstructured(amount)`: the entries of smallest magnitude.
class L1UnstructuredMethod final : public BasePruningMethod {
 public:
  /// Python's `L1Unstructured(amount)`.
  explicit L1UnstructuredMethod(Amount amount) : amount_(amount) {}
  PruningType pruning_type() const override { return PruningType::kUnstructured; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  Amount amount_;
};

/// Python's `RandomStructured(amount, dim=-1)`: whole channels along `dim`, at random.
class RandomStructuredMethod final : public BasePruningMethod {
 public:
  /// Python's `RandomStructured(amount, dim)`.
  RandomStructuredMethod(Amount amount, std::int64_t dim = -1) : amount_(amount), dim_(dim) {}
  PruningType pruning_type() const override { return PruningType::kStructured; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;
  std::optional<std::int64_t> dim() const override { return dim_; }

 private:
  Amount amount_;
  std::int64_t dim_;
};

/// The order of the norm `LnStructured` ranks channels by: a number (`1`, `2`, `2.5`,
/// `INFINITY`, ...) or Python's `"fro"` and `"nuc"`.
class NormOrder {
 public:
  /// A number, as Python's `n=2` or `n=float("inf")`.
  NormOrder(double p) : value_(p) {}  // NOLINT(google-explicit-constructor): Python passes a number
  /// An integer, as Python's `n=1`.
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  NormOrder(I p) : value_(static_cast<double>(p)) {}  // NOLINT(google-explicit-constructor)
  /// Python's `"fro"` or `"nuc"`.
  NormOrder(const char* name) : value_(std::string(name)) {}  // NOLINT(google-explicit-constructor)
  /// The same from a string.
  NormOrder(std::string name) : value_(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  /// The number or the name.
  const std::variant<double, std::string>& value() const noexcept { return value_; }

 private:
  std::variant<double, std::string> value_;
};

/// Python's `LnStructured(amount, n, dim=-1)`: the channels along `dim` of smallest Ln norm.
class LnStructuredMethod final : public BasePruningMethod {
 public:
  /// Python's `LnStructured(amount, n, dim)`.
  LnStructuredMethod(Amount amount, NormOrder n, std::int64_t dim = -1)
      : amount_(amount), n_(std::move(n)), dim_(dim) {}
  PruningType pruning_type() const override { return PruningType::kStructured; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;
  std::optional<std::int64_t> dim() const override { return dim_; }

 private:
  Amount amount_;
  NormOrder n_;
  std::int64_t dim_;
};

/// Python's `CustomFromMask(mask)`: the entries where `mask` is 0.
class CustomFromMaskMethod final : public BasePruningMethod {
 public:
  /// Python's `CustomFromMask(mask)`.
  explicit CustomFromMaskMethod(at::Tensor mask) : mask_(std::move(mask)) {}
  PruningType pruning_type() const override { return PruningType::kGlobal; }
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  at::Tensor mask_;
};

/// Python's `PruningContainer`: the methods applied in turn to one tensor, each to the entries
/// (or channels) the ones before it kept. Pruning a pruned tensor again makes one.
class PruningContainer final : public BasePruningMethod {
 public:
  /// A container of `methods`, applied in their order.
  explicit PruningContainer(std::vector<std::shared_ptr<const BasePruningMethod>> methods = {})
      : methods_(std::move(methods)) {}
  /// Python's `add_pruning_method`.
  void add_pruning_method(std::shared_ptr<const BasePruningMethod> method) {
    methods_.push_back(std::move(method));
  }
  /// Python's `len(container)`.
  std::size_t size() const noexcept { return methods_.size(); }
  /// Python's `container[index]`.
  const BasePruningMethod& operator[](std::size_t index) const { return *methods_.at(index); }
  PruningType pruning_type() const override { return PruningType::kUnstructured; }
  /// The last method's mask, computed on what the mask so far keeps (Python's
  /// `_combine_masks`).
  at::Tensor compute_mask(const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  std::vector<std::shared_ptr<const BasePruningMethod>> methods_;
};

/// Names a pruning method class where Python passes the class itself
/// (`global_unstructured(..., pruning_method=L1Unstructured, amount=0.2)`); calling it makes
/// the method, as calling Python's class does (`prune::L1Unstructured(0.3)`).
template <class Method>
struct MethodType {
  /// Makes the method from its constructor's arguments.
  template <class... A>
  Method operator()(A&&... args) const {
    return Method(std::forward<A>(args)...);
  }
};
/// Python's class `prune.Identity`.
inline constexpr MethodType<IdentityMethod> Identity{};
/// Python's class `prune.RandomUnstructured`.
inline constexpr MethodType<RandomUnstructuredMethod> RandomUnstructured{};
/// Python's class `prune.L1Unstructured`.
inline constexpr MethodType<L1UnstructuredMethod> L1Unstructured{};
/// Python's class `prune.RandomStructured`.
inline constexpr MethodType<RandomStructuredMethod> RandomStructured{};
/// Python's class `prune.LnStructured`.
inline constexpr MethodType<LnStructuredMethod> LnStructured{};
/// Python's class `prune.CustomFromMask`.
inline constexpr MethodType<CustomFromMaskMethod> CustomFromMask{};

/// A module as `global_unstructured` takes it: any spelling `register_*` takes.
class Target {
 public:
  /// The module behind any spelling.
  template <class M, modhooks::detail::IfNnModule<M> = 0>
  Target(M&& module)  // NOLINT(google-explicit-constructor,bugprone-forwarding-reference-overload)
      : module_(&modhooks::detail::module_ref(module)) {}
  /// The module.
  torch::nn::Module& module() const noexcept { return *module_; }

 private:
  torch::nn::Module* module_;
};

namespace detail {
void apply(torch::nn::Module& module, const std::string& name,
           const std::shared_ptr<const BasePruningMethod>& method,
           const at::Tensor& importance_scores);
void remove(torch::nn::Module& module, const std::string& name);
bool is_pruned(const torch::nn::Module& module);
void global_unstructured(const std::vector<std::pair<Target, std::string>>& parameters,
                         std::shared_ptr<const BasePruningMethod> method,
                         const std::vector<at::Tensor>& importance_scores);
}  // namespace detail

/// Python's `BasePruningMethod.apply(module, name, ...)`: prunes `name` with `method`. The
/// first pruning moves the parameter to `name_orig` and registers the buffer `name_mask`; a
/// forward pre-hook sets `name = name_orig * name_mask` before each forward through
/// `modhooks::call`, a hook-aware holder or `modhooks::Sequential`. Pruning again combines the
/// masks (a `PruningContainer`). The mask is computed on `importance_scores` where given.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> apply(M&& module, const std::string& name,
                                 const std::shared_ptr<const BasePruningMethod>& method,
                                 const at::Tensor& importance_scores = {}) {
  detail::apply(modhooks::detail::module_ref(module), name, method, importance_scores);
  return std::forward<M>(module);
}

/// Python's `prune.identity(module, name)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> identity(M&& module, const std::string& name) {
  return apply(std::forward<M>(module), name, std::make_shared<IdentityMethod>());
}

/// Python's `prune.random_unstructured(module, name, amount)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> random_unstructured(M&& module, const std::string& name, Amount amount) {
  return apply(std::forward<M>(module), name, std::make_shared<RandomUnstructuredMethod>(amount));
}

/// Python's `prune.l1_unstructured(module, name, amount, importance_scores=None)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> l1_unstructured(M&& module, const std::string& name, Amount amount,
                                           const at::Tensor& importance_scores = {}) {
  return apply(std::forward<M>(module), name, std::make_shared<L1UnstructuredMethod>(amount),
               importance_scores);
}

/// Python's `prune.random_structured(module, name, amount, dim)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> random_structured(M&& module, const std::string& name, Amount amount,
                                             std::int64_t dim) {
  return apply(std::forward<M>(module), name,
               std::make_shared<RandomStructuredMethod>(amount, dim));
}

/// Python's `prune.ln_structured(module, name, amount, n, dim, importance_scores=None)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> ln_structured(M&& module, const std::string& name, Amount amount,
                                         NormOrder n, std::int64_t dim,
                                         const at::Tensor& importance_scores = {}) {
  return apply(std::forward<M>(module), name,
               std::make_shared<LnStructuredMethod>(amount, std::move(n), dim), importance_scores);
}

/// Python's `prune.custom_from_mask(module, name, mask)`.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> custom_from_mask(M&& module, const std::string& name,
                                            const at::Tensor& mask) {
  return apply(std::forward<M>(module), name, std::make_shared<CustomFromMaskMethod>(mask));
}

/// Python's `prune.global_unstructured(parameters, pruning_method, importance_scores=None,
/// amount=...)`: one mask over the tensors of `parameters` taken together, then
/// `custom_from_mask` on each. `importance_scores`, where not empty, has a tensor for each
/// entry of `parameters` (an undefined one: the tensor itself). TypeError for a method that is
/// not unstructured.
///
/// **Example**:
/// \code
///   namespace prune = modhooks::nn::utils::prune;
///   prune::global_unstructured({{fc1, "weight"}, {fc2, "weight"}}, prune::L1Unstructured, 0.2);
/// \endcode
template <class Method>
void global_unstructured(const std::vector<std::pair<Target, std::string>>& parameters,
                         MethodType<Method> pruning_method, Amount amount,
                         const std::vector<at::Tensor>& importance_scores = {}) {
  detail::global_unstructured(parameters, std::make_shared<Method>(pruning_method(amount)),
                              importance_scores);
}

/// The same with a method made beforehand (one whose constructor takes more than an amount).
inline void global_unstructured(const std::vector<std::pair<Target, std::string>>& parameters,
                                std::shared_ptr<const BasePruningMethod> method,
                                const std::vector<at::Tensor>& importance_scores = {}) {
  detail::global_unstructured(parameters, std::move(method), importance_scores);
}

/// Python's `prune.remove(module, name)`: `name` is a parameter again, holding
/// `name_orig * name_mask`; `name_orig`, `name_mask` and the hook are gone. ValueError where
/// `name` is not pruned.
template <class M, modhooks::detail::IfNnModule<M> = 0>
utils::detail::Returned<M> remove(M&& module, const std::string& name) {
  detail::remove(modhooks::detail::module_ref(module), name);
  return std::forward<M>(module);
}

/// Python's `prune.is_pruned(module)`: whether the module or one of its submodules has a
/// pruned tensor.
template <class M, modhooks::detail::IfNnModule<M> = 0>
bool is_pruned(const M& module) {
  return detail::is_pruned(modhooks::detail::module_ref(module));
}

/// @}

}  // namespace nn::utils::prune
MODHOOKS_END_NAMESPACE
