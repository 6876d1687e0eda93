// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <c10/util/Exception.h>
#include <c10/util/Type.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/nn/call.h"
#include "modhooks/nn/detail/clone.h"
#include "modhooks/nn/holder.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// `FORWARD_HAS_DEFAULT_ARGS` lets AnyModule fill in the default arguments of a module's
/// `forward`, through three virtual functions that libtorch keeps protected for AnyModule. A
/// pointer to member named through a class derived from `Module` reaches them on any module, so
/// the adapter below can answer for its child.
struct DefaultArgs : torch::nn::Module {
  static bool has(torch::nn::Module& m) { return (m.*&DefaultArgs::_forward_has_default_args)(); }
  static unsigned int num_required(torch::nn::Module& m) {
    return (m.*&DefaultArgs::_forward_num_required_args)();
  }
  static std::vector<torch::nn::AnyValue> populate(torch::nn::Module& m,
                                                   std::vector<torch::nn::AnyValue>&& args) {
    return (m.*&DefaultArgs::_forward_populate_default_args)(std::move(args));
  }
};

/// An adapter that `torch::nn::AnyModule` can type-erase: its `forward` has the child's
/// signature and runs the child through `call`, and it fills in the child's default arguments as
/// AnyModule would for the child itself. It registers nothing, so parameter names stay those of
/// the child.
template <class T, class Forward = decltype(&T::forward)>
struct HookedForward;

/// `C` is the class that declares `forward`: `T` or a base of it (the norm and pooling templates).
template <class T, class C, class R, class... A>
struct HookedForward<T, R (C::*)(A...)> : torch::nn::Module {
  explicit HookedForward(std::shared_ptr<T> child) : child(std::move(child)) {}
  R forward(A... args) { return modhooks::call(child, std::forward<A>(args)...); }

  bool _forward_has_default_args() override { return DefaultArgs::has(*child); }
  unsigned int _forward_num_required_args() override { return DefaultArgs::num_required(*child); }
  std::vector<torch::nn::AnyValue> _forward_populate_default_args(
      std::vector<torch::nn::AnyValue>&& args) override {
    return DefaultArgs::populate(*child, std::move(args));
  }

  std::shared_ptr<T> child;
};

/// The child as AnyModule gets it; `Sequential` needs its type to run it through its hooks.
template <class T>
std::shared_ptr<T> shared_module(std::shared_ptr<T> module) {
  return module;
}
template <class T>
std::shared_ptr<T> shared_module(const torch::nn::ModuleHolder<T>& module) {
  return module.ptr();
}
template <class M, std::enable_if_t<std::is_base_of_v<torch::nn::Module, std::decay_t<M>>, int> = 0>
std::shared_ptr<std::decay_t<M>> shared_module(M&& module) {
  return std::make_shared<std::decay_t<M>>(std::forward<M>(module));
}

template <class M>
using SharedModule = decltype(shared_module(std::declval<M>()));

template <class M, class = void>
struct IsTypedModule : std::false_type {};
template <class M>
struct IsTypedModule<M, std::void_t<SharedModule<M>>> : std::true_type {};

/// A child of `modhooks::Sequential`: libtorch's AnyModule of the child itself (what iteration,
/// `at`, `ptr` and `clone` see, as in `torch::nn::Sequential`) and of its hook-running adapter.
struct SequentialChild {
  template <class M>
  SequentialChild(std::string name, M&& module) : name(std::move(name)) {
    static_assert(IsTypedModule<M>::value,
                  "modhooks::Sequential takes a module, a ModuleHolder or a shared_ptr to a "
                  "module: it needs the child's type to run it through its hooks, which an "
                  "AnyModule has erased");
    auto child = shared_module(std::forward<M>(module));
    using T = typename decltype(child)::element_type;
    adapt = [](const torch::nn::AnyModule& m) {
      return torch::nn::AnyModule(std::make_shared<HookedForward<T>>(m.ptr<T>()));
    };
    this->module = torch::nn::AnyModule(std::move(child));
    hooked = adapt(this->module);
  }

  /// The same child, with a new adapter around `module` (a clone of this child).
  SequentialChild with_module(torch::nn::AnyModule module) const {
    SequentialChild copy = *this;
    copy.hooked = adapt(module);
    copy.module = std::move(module);
    return copy;
  }

  std::string name;
  torch::nn::AnyModule module;
  torch::nn::AnyModule hooked;
  torch::nn::AnyModule (*adapt)(const torch::nn::AnyModule&) = nullptr;
};

}  // namespace detail

/// \addtogroup api_nn
/// @{

/// A child of a `Sequential` with its name: `Sequential({{"fc", torch::nn::Linear(4, 2)}})`, as
/// libtorch's `NamedAnyModule`, but keeping the child's type.
using NamedModule = detail::SequentialChild;

/// A hook-aware `torch::nn::Sequential` with the same members: built the same way, but its
/// `forward` runs every child through `modhooks::call`, so the children's hooks fire. Children
/// are registered under "0", "1", ... (or the given names), so parameter names match libtorch's
/// and Python's. Iteration, `at`, `ptr` and `operator[]` give the children themselves, as
/// libtorch's do; calling a child through them calls its `forward` directly.
///
/// A child whose `forward` has default arguments (LSTM, MultiheadAttention) gets them filled in
/// as libtorch's Sequential fills them in, before `call`: its hooks see them as arguments, where
/// Python's would see only those passed. Unlike libtorch's, it takes no `AnyModule`: the type of
/// the child, which `call` needs, is gone from it.
///
/// **Example**:
/// \code
///   modhooks::Sequential seq(modhooks::nn::Linear(4, 8), torch::nn::ReLU(),
///                            torch::nn::Linear(8, 2));
///   auto h = modhooks::register_forward_hook(seq->ptr(2), hook);  // on the last Linear
///   at::Tensor y = seq(torch::randn({3, 4}));  // fires seq's hooks and every child's
/// \endcode
class SequentialImpl : public torch::nn::Cloneable<SequentialImpl> {
 public:
  /// Iterates the children as libtorch's `AnyModule`s, as libtorch's Sequential does.
  using Iterator = std::vector<torch::nn::AnyModule>::iterator;
  /// The same, const.
  using ConstIterator = std::vector<torch::nn::AnyModule>::const_iterator;

  /// No children. \see \ref api_nn
  SequentialImpl() = default;

  /// The children in order, registered as "0", "1", ...: modules, `ModuleHolder`s or
  /// `shared_ptr`s to modules.
  ///
  /// **Example**:
  /// \code
  ///   auto seq = std::make_shared<modhooks::SequentialImpl>(torch::nn::Linear(4, 2),
  ///                                                         torch::nn::ReLU());
  /// \endcode
  template <class... Modules>
  explicit SequentialImpl(Modules&&... modules) {
    modules_.reserve(sizeof...(Modules));
    children_info_.reserve(sizeof...(Modules));
    (push_back(std::forward<Modules>(modules)), ...);
  }

  /// The children in order, under their names.
  ///
  /// **Example**:
  /// \code
  ///   auto seq = std::make_shared<modhooks::SequentialImpl>(std::initializer_list<
  ///       modhooks::NamedModule>{{"fc", torch::nn::Linear(4, 2)}, {"act", torch::nn::ReLU()}});
  /// \endcode
  explicit SequentialImpl(std::initializer_list<NamedModule> named_modules) {
    for (const auto& child : named_modules) add(child);
  }

  /// A deep copy, as libtorch's: every child by its own `clone`, so weights are copied, not
  /// shared. The names stay. A child with nn utilities (at any depth) is copied as Python's
  /// `copy.deepcopy` copies it: the same utilities on the copy, with the same tensors' values
  /// (libtorch's own `clone` of such a module fails, as its tensors are not the class's).
  ///
  /// **Example**:
  /// \code
  ///   auto copy = std::dynamic_pointer_cast<modhooks::SequentialImpl>(seq->clone());
  /// \endcode
  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device = torch::nullopt) const override {
    auto copy = std::make_shared<SequentialImpl>();
    for (std::size_t i = 0; i < modules_.size(); ++i) {
      torch::nn::AnyModule cloned;
      detail::clone_module(*modules_[i].ptr(), [&] {
        cloned = modules_[i].clone(device);
        return cloned.ptr();
      });
      copy->add(children_info_[i].with_module(std::move(cloned)));
    }
    copy->train(is_training());
    return copy;
  }

  /// Nothing to reset: the children own their parameters. \see \ref api_nn
  void reset() override {}

  /// Prints "modhooks::Sequential". \see \ref api_nn
  void pretty_print(std::ostream& stream) const override { stream << "modhooks::Sequential"; }

  /// Runs the children in order, each through `call`; the first receives `inputs`. `Return`
  /// (`at::Tensor` unless given) must be the type the last child returns. The Sequential's own
  /// hooks fire when it runs through `call` or its holder (`seq(x)`), not through `forward`.
  ///
  /// **Example**:
  /// \code
  ///   at::Tensor y = seq->forward(torch::randn({3, 4}));
  /// \endcode
  template <class Return = at::Tensor, class... Inputs>
  Return forward(Inputs&&... inputs) {
    TORCH_CHECK(!is_empty(), "Cannot call forward() on an empty Sequential");
    auto it = children_info_.begin();
    torch::nn::AnyValue value = it->hooked.any_forward(std::forward<Inputs>(inputs)...);
    for (++it; it != children_info_.end(); ++it) value = it->hooked.any_forward(std::move(value));
    auto* result = value.template try_get<Return>();
    TORCH_CHECK(result, "The type of the return value is ", c10::demangle(value.type_info().name()),
                ", but you asked for type ", c10::demangle_type<Return>());
    return std::move(*result);
  }

  /// Appends a module, a `ModuleHolder` (e.g. `torch::nn::Linear`, `modhooks::nn::Linear`) or a
  /// `shared_ptr` to a module, under the next index or the given name.
  ///
  /// **Example**:
  /// \code
  ///   seq->push_back(modhooks::nn::Linear(2, 2));  // as "2" after two children
  ///   seq->push_back("out", torch::nn::Tanh());
  /// \endcode
  template <class M>
  void push_back(M&& module) {
    push_back(std::to_string(modules_.size()), std::forward<M>(module));
  }

  /// The same under `name`. \see push_back(M&&)
  template <class M>
  void push_back(std::string name, M&& module) {
    add(NamedModule(std::move(name), std::forward<M>(module)));
  }

  /// Appends every module of `container`, as `push_back` would.
  ///
  /// **Example**:
  /// \code
  ///   seq->extend(std::vector<torch::nn::Linear>{torch::nn::Linear(2, 2)});
  /// \endcode
  template <class Container>
  void extend(const Container& container) {
    for (const auto& module : container) push_back(module);
  }

  /// Appends the children of `other` (the same modules, not copies), as libtorch's `extend`
  /// with a Sequential does.
  ///
  /// **Example**:
  /// \code
  ///   seq->extend(*other);  // other: a modhooks::Sequential
  /// \endcode
  void extend(const SequentialImpl& other) {
    auto children = other.children_info_;  // `other` may be this Sequential
    for (auto& child : children) {
      child.name = std::to_string(modules_.size());
      add(std::move(child));
    }
  }

  /// The first child, as libtorch's `AnyModule`.
  ///
  /// **Example**:
  /// \code
  ///   for (const torch::nn::AnyModule& child : *seq) std::cout << child.ptr()->name() << "\n";
  /// \endcode
  Iterator begin() { return modules_.begin(); }
  /// The same, const. \see begin()
  ConstIterator begin() const { return modules_.begin(); }
  /// Past the last child. \see begin()
  Iterator end() { return modules_.end(); }
  /// The same, const. \see begin()
  ConstIterator end() const { return modules_.end(); }

  /// Child `index` as a `T`; throws if it is of another type.
  ///
  /// **Example**:
  /// \code
  ///   torch::nn::LinearImpl& fc = seq->at<torch::nn::LinearImpl>(0);
  /// \endcode
  template <class T>
  T& at(std::size_t index) {
    TORCH_CHECK(index < size(), "Index out of range");
    return modules_[index].get<T>();
  }
  /// The same, const. \see at(std::size_t)
  template <class T>
  const T& at(std::size_t index) const {
    TORCH_CHECK(index < size(), "Index out of range");
    return modules_[index].get<T>();
  }

  /// Child `index`.
  ///
  /// **Example**:
  /// \code
  ///   std::shared_ptr<torch::nn::Module> first = seq->ptr(0);
  /// \endcode
  std::shared_ptr<torch::nn::Module> ptr(std::size_t index) const {
    TORCH_CHECK(index < size(), "Index out of range");
    return modules_[index].ptr();
  }
  /// Child `index` as a `shared_ptr<T>`; throws if it is of another type.
  ///
  /// **Example**:
  /// \code
  ///   std::shared_ptr<torch::nn::LinearImpl> fc = seq->ptr<torch::nn::LinearImpl>(0);
  /// \endcode
  template <class T>
  std::shared_ptr<T> ptr(std::size_t index) const {
    TORCH_CHECK(index < size(), "Index out of range");
    return modules_[index].ptr<T>();
  }
  /// Child `index`, as `ptr(index)`.
  ///
  /// **Example**:
  /// \code
  ///   std::shared_ptr<torch::nn::Module> first = (*seq)[0];
  /// \endcode
  std::shared_ptr<torch::nn::Module> operator[](std::size_t index) const { return ptr(index); }

  /// The number of children. \see \ref api_nn
  std::size_t size() const noexcept { return modules_.size(); }
  /// Whether it has no children. \see \ref api_nn
  bool is_empty() const noexcept { return modules_.empty(); }

 private:
  void add(detail::SequentialChild child) {
    register_module(child.name, child.module.ptr());
    modules_.push_back(child.module);
    children_info_.push_back(std::move(child));
  }

  std::vector<torch::nn::AnyModule> modules_;
  std::vector<detail::SequentialChild> children_info_;
};

/// The holder of `SequentialImpl`: `seq(x)` runs the Sequential's own hooks around its children's.
///
/// **Example**:
/// \code
///   modhooks::Sequential seq(torch::nn::Linear(4, 2), torch::nn::ReLU());
///   at::Tensor y = seq(torch::randn({3, 4}));
/// \endcode
class Sequential : public nn::ModuleHolder<SequentialImpl> {
 public:
  using nn::ModuleHolder<SequentialImpl>::ModuleHolder;
  /// The module type held, as in libtorch's holders.
  using Impl = SequentialImpl;

  /// An empty Sequential (not an empty holder: that is `Sequential(nullptr)`).
  /// \see \ref api_nn
  Sequential() = default;

  /// Children under their names.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::Sequential seq({{"fc", torch::nn::Linear(4, 2)}, {"act", torch::nn::ReLU()}});
  /// \endcode
  Sequential(std::initializer_list<NamedModule> named_modules)
      : nn::ModuleHolder<SequentialImpl>(std::make_shared<SequentialImpl>(named_modules)) {}
};

/// @}

MODHOOKS_END_NAMESPACE
