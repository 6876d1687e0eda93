// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/pimpl.h>

#include <memory>
#include <type_traits>
#include <utility>

#include "modhooks/nn/call.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn {

/// \addtogroup api_nn
/// @{

/// A `torch::nn::ModuleHolder` whose `operator()` runs the module through `modhooks::call`, so
/// `holder(args...)` fires the module's hooks. libtorch's holder calls `forward` directly and its
/// `operator()` is not virtual, hence a holder of our own rather than a hook point in libtorch's.
///
/// It derives from libtorch's holder of the same module, so it goes wherever that holder goes:
/// `register_module`, `torch::nn::Sequential::push_back`, `modhooks::register_*`. It converts to
/// and from libtorch's holders of the same `Impl`; every conversion shares the module, as copying
/// a holder does.
///
/// **Example**:
/// \code
///   modhooks::nn::Linear fc(4, 2);        // every torch::nn holder has its modhooks::nn twin
///   auto h = modhooks::register_forward_hook(fc, hook);
///   at::Tensor y = fc(torch::randn({3, 4}));  // fires h
/// \endcode
template <class Impl>
class ModuleHolder : public torch::nn::ModuleHolder<Impl> {
  using Base = torch::nn::ModuleHolder<Impl>;

 public:
  using Base::Base;

  /// Default-constructs the module, as libtorch's holder does (a static error when `Impl` has no
  /// default constructor). \see \ref api_nn
  ModuleHolder() = default;

  /// Shares the module of a libtorch holder.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::nn::Linear fc = torch::nn::Linear(4, 2);
  /// \endcode
  /* implicit */ ModuleHolder(const torch::nn::ModuleHolder<Impl>& other)
      : Base(other.is_empty() ? nullptr : other.ptr()) {}

  /// A libtorch holder of the same module.
  ///
  /// **Example**:
  /// \code
  ///   torch::nn::Linear plain = hooked;  // hooked: a modhooks::nn::Linear
  /// \endcode
  template <class Holder, std::enable_if_t<std::is_base_of_v<Base, Holder> &&
                                               !std::is_base_of_v<ModuleHolder, Holder>,
                                           int> = 0>
  /* implicit */ operator Holder() const {
    return Holder(this->impl_);
  }

  /// Runs the module through its hooks: `modhooks::call(*this, args...)`. Throws on an empty
  /// holder where libtorch's would dereference null.
  ///
  /// **Example**:
  /// \code
  ///   modhooks::nn::Conv2d conv(3, 8, 3);
  ///   at::Tensor y = conv(torch::randn({1, 3, 32, 32}));  // conv's hooks fire
  /// \endcode
  template <class... Args>
  auto operator()(Args&&... args)
      -> decltype(modhooks::call(std::declval<Impl&>(), std::forward<Args>(args)...)) {
    return modhooks::call(this->ptr(), std::forward<Args>(args)...);  // the owner holds it
  }
};

/// @}

}  // namespace nn
MODHOOKS_END_NAMESPACE

/// \addtogroup api_nn
/// @{

/// Like `TORCH_MODULE_IMPL(Name, ImplType)`: declares the holder `Name` of `ImplType`, whose
/// `operator()` fires the module's hooks.
///
/// **Example**:
/// \code
///   MODHOOKS_MODULE_IMPL(Block, torch::nn::TransformerEncoderLayerImpl);
///   Block block(torch::nn::TransformerEncoderLayerOptions(16, 4));
///   at::Tensor y = block(torch::randn({5, 2, 16}));  // fires block's hooks
/// \endcode
#define MODHOOKS_MODULE_IMPL(Name, ImplType)                    \
  class Name : public ::modhooks::nn::ModuleHolder<ImplType> {  \
   public:                                                      \
    using ::modhooks::nn::ModuleHolder<ImplType>::ModuleHolder; \
    using Impl = ImplType;                                      \
  }

/// Like `TORCH_MODULE(Name)`: declares the holder `Name` of `NameImpl`, whose `operator()` fires
/// the module's hooks.
///
/// **Example**:
/// \code
///   struct NetImpl : torch::nn::Module { at::Tensor forward(at::Tensor x); };
///   MODHOOKS_MODULE(Net);
///   Net net;
///   auto y = net(x);   // runs Net's hooks, as modhooks::call(net, x)
/// \endcode
#define MODHOOKS_MODULE(Name) MODHOOKS_MODULE_IMPL(Name, Name##Impl)

/// @}
