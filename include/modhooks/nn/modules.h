// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/nn/functional.h>  // libtorch 1.13's modules.h needs it included first
#include <torch/nn/modules.h>
#include <torch/nn/options.h>
#include <torch/version.h>

#include <string>
#include <type_traits>
#include <vector>

#include "modhooks/nn/holder.h"
#include "modhooks/version.h"

/// modhooks::nn mirrors every module holder of torch::nn except the containers (no forward of
/// their own; modhooks::Sequential stands for torch::nn::Sequential) and Functional (a wrapper of
/// a function, with no module of its own to hook). Each holder takes the
/// same constructors and options as libtorch's and differs only in that `holder(args...)` fires
/// the module's hooks. tests/nn_modules_test.cpp compares this list with libtorch's headers.

/// The holders libtorch 1.13 declares with TORCH_MODULE, by name.
// clang-format off
#define MODHOOKS_NN_HOLDERS_1_13(X) \
  X(AdaptiveAvgPool1d) X(AdaptiveAvgPool2d) X(AdaptiveAvgPool3d) X(AdaptiveLogSoftmaxWithLoss) \
  X(AdaptiveMaxPool1d) X(AdaptiveMaxPool2d) X(AdaptiveMaxPool3d) X(AlphaDropout) X(AvgPool1d) \
  X(AvgPool2d) X(AvgPool3d) X(BCELoss) X(BCEWithLogitsLoss) X(BatchNorm1d) X(BatchNorm2d) \
  X(BatchNorm3d) X(Bilinear) X(CELU) X(CTCLoss) X(ConstantPad1d) X(ConstantPad2d) \
  X(ConstantPad3d) X(Conv1d) X(Conv2d) X(Conv3d) X(ConvTranspose1d) X(ConvTranspose2d) \
  X(ConvTranspose3d) X(CosineEmbeddingLoss) X(CosineSimilarity) X(CrossEntropyLoss) \
  X(CrossMapLRN2d) X(Dropout) X(Dropout2d) X(Dropout3d) X(ELU) X(FeatureAlphaDropout) X(Flatten) \
  X(Fold) X(FractionalMaxPool2d) X(FractionalMaxPool3d) X(GELU) X(GLU) X(GRU) X(GRUCell) \
  X(GroupNorm) X(Hardshrink) X(Hardtanh) X(HingeEmbeddingLoss) X(HuberLoss) X(Identity) \
  X(InstanceNorm1d) X(InstanceNorm2d) X(InstanceNorm3d) X(KLDivLoss) X(L1Loss) X(LPPool1d) \
  X(LPPool2d) X(LSTM) X(LSTMCell) X(LayerNorm) X(LeakyReLU) X(Linear) X(LocalResponseNorm) \
  X(LogSigmoid) X(LogSoftmax) X(MSELoss) X(MarginRankingLoss) X(MaxPool1d) X(MaxPool2d) \
  X(MaxPool3d) X(MaxUnpool1d) X(MaxUnpool2d) X(MaxUnpool3d) X(Mish) X(MultiLabelMarginLoss) \
  X(MultiLabelSoftMarginLoss) X(MultiMarginLoss) X(MultiheadAttention) X(NLLLoss) X(PReLU) \
  X(PairwiseDistance) X(PixelShuffle) X(PixelUnshuffle) X(PoissonNLLLoss) X(RNN) X(RNNCell) \
  X(RReLU) X(ReLU) X(ReLU6) X(ReflectionPad1d) X(ReflectionPad2d) X(ReflectionPad3d) \
  X(ReplicationPad1d) X(ReplicationPad2d) X(ReplicationPad3d) X(SELU) X(SiLU) X(Sigmoid) \
  X(SmoothL1Loss) X(SoftMarginLoss) X(Softmax) X(Softmax2d) X(Softmin) X(Softplus) X(Softshrink) \
  X(Softsign) X(Tanh) X(Tanhshrink) X(Threshold) X(Transformer) X(TransformerDecoder) \
  X(TransformerDecoderLayer) X(TransformerEncoder) X(TransformerEncoderLayer) \
  X(TripletMarginLoss) X(TripletMarginWithDistanceLoss) X(Unflatten) X(Unfold) X(Upsample) \
  X(ZeroPad2d)
// clang-format on

/// Holders that later libtorch releases added.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define MODHOOKS_NN_HOLDERS_2_1(X) X(ZeroPad1d) X(ZeroPad3d)
#else
#define MODHOOKS_NN_HOLDERS_2_1(X)
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define MODHOOKS_NN_HOLDERS_2_2(X) X(LPPool3d)
#else
#define MODHOOKS_NN_HOLDERS_2_2(X)
#endif

MODHOOKS_BEGIN_NAMESPACE
namespace nn {

#define MODHOOKS_NN_HOLDER(Name) MODHOOKS_MODULE_IMPL(Name, torch::nn::Name##Impl);
MODHOOKS_NN_HOLDERS_1_13(MODHOOKS_NN_HOLDER)
MODHOOKS_NN_HOLDERS_2_1(MODHOOKS_NN_HOLDER)
MODHOOKS_NN_HOLDERS_2_2(MODHOOKS_NN_HOLDER)
#undef MODHOOKS_NN_HOLDER

using torch::nn::AdaptiveAvgPool1dOptions;
using torch::nn::AdaptiveAvgPool2dOptions;
using torch::nn::AdaptiveAvgPool3dOptions;
using torch::nn::AdaptiveAvgPoolOptions;
using torch::nn::AdaptiveLogSoftmaxWithLossOptions;
using torch::nn::AdaptiveMaxPool1dOptions;
using torch::nn::AdaptiveMaxPool2dOptions;
using torch::nn::AdaptiveMaxPool3dOptions;
using torch::nn::AdaptiveMaxPoolOptions;
using torch::nn::AlphaDropoutOptions;
using torch::nn::AvgPool1dOptions;
using torch::nn::AvgPool2dOptions;
using torch::nn::AvgPool3dOptions;
using torch::nn::AvgPoolOptions;
using torch::nn::BatchNorm1dOptions;
using torch::nn::BatchNorm2dOptions;
using torch::nn::BatchNorm3dOptions;
using torch::nn::BatchNormOptions;
using torch::nn::BCELossOptions;
using torch::nn::BCEWithLogitsLossOptions;
using torch::nn::BilinearOptions;
using torch::nn::CELUOptions;
using torch::nn::ConstantPad1dOptions;
using torch::nn::ConstantPad2dOptions;
using torch::nn::ConstantPad3dOptions;
using torch::nn::ConstantPadOptions;
using torch::nn::Conv1dOptions;
using torch::nn::Conv2dOptions;
using torch::nn::Conv3dOptions;
using torch::nn::ConvOptions;
using torch::nn::ConvTranspose1dOptions;
using torch::nn::ConvTranspose2dOptions;
using torch::nn::ConvTranspose3dOptions;
using torch::nn::ConvTransposeOptions;
using torch::nn::CosineEmbeddingLossOptions;
using torch::nn::CosineSimilarityOptions;
using torch::nn::CrossEntropyLossOptions;
using torch::nn::CrossMapLRN2dOptions;
using torch::nn::CTCLossOptions;
using torch::nn::Dropout2dOptions;
using torch::nn::Dropout3dOptions;
using torch::nn::DropoutOptions;
using torch::nn::ELUOptions;
using torch::nn::EmbeddingBagFromPretrainedOptions;
using torch::nn::EmbeddingBagOptions;
using torch::nn::EmbeddingFromPretrainedOptions;
using torch::nn::EmbeddingOptions;
using torch::nn::FeatureAlphaDropoutOptions;
using torch::nn::FlattenOptions;
using torch::nn::FoldOptions;
using torch::nn::FractionalMaxPool2dOptions;
using torch::nn::FractionalMaxPool3dOptions;
using torch::nn::FractionalMaxPoolOptions;
using torch::nn::GELUOptions;
using torch::nn::GLUOptions;
using torch::nn::GroupNormOptions;
using torch::nn::GRUCellOptions;
using torch::nn::GRUOptions;
using torch::nn::HardshrinkOptions;
using torch::nn::HardtanhOptions;
using torch::nn::HingeEmbeddingLossOptions;
using torch::nn::HuberLossOptions;
using torch::nn::InstanceNorm1dOptions;
using torch::nn::InstanceNorm2dOptions;
using torch::nn::InstanceNorm3dOptions;
using torch::nn::InstanceNormOptions;
using torch::nn::KLDivLossOptions;
using torch::nn::L1LossOptions;
using torch::nn::LayerNormOptions;
using torch::nn::LeakyReLUOptions;
using torch::nn::LinearOptions;
using torch::nn::LocalResponseNormOptions;
using torch::nn::LogSoftmaxOptions;
using torch::nn::LPPool1dOptions;
using torch::nn::LPPool2dOptions;
using torch::nn::LPPoolOptions;
using torch::nn::LSTMCellOptions;
using torch::nn::LSTMOptions;
using torch::nn::MarginRankingLossOptions;
using torch::nn::MaxPool1dOptions;
using torch::nn::MaxPool2dOptions;
using torch::nn::MaxPool3dOptions;
using torch::nn::MaxPoolOptions;
using torch::nn::MaxUnpool1dOptions;
using torch::nn::MaxUnpool2dOptions;
using torch::nn::MaxUnpool3dOptions;
using torch::nn::MaxUnpoolOptions;
using torch::nn::MSELossOptions;
using torch::nn::MultiheadAttentionOptions;
using torch::nn::MultiLabelMarginLossOptions;
using torch::nn::MultiLabelSoftMarginLossOptions;
using torch::nn::MultiMarginLossOptions;
using torch::nn::NLLLossOptions;
using torch::nn::PairwiseDistanceOptions;
using torch::nn::PixelShuffleOptions;
using torch::nn::PixelUnshuffleOptions;
using torch::nn::PoissonNLLLossOptions;
using torch::nn::PReLUOptions;
using torch::nn::ReflectionPad1dOptions;
using torch::nn::ReflectionPad2dOptions;
using torch::nn::ReflectionPad3dOptions;
using torch::nn::ReflectionPadOptions;
using torch::nn::ReLU6Options;
using torch::nn::ReLUOptions;
using torch::nn::ReplicationPad1dOptions;
using torch::nn::ReplicationPad2dOptions;
using torch::nn::ReplicationPad3dOptions;
using torch::nn::ReplicationPadOptions;
using torch::nn::RNNCellOptions;
using torch::nn::RNNOptions;
using torch::nn::RReLUOptions;
using torch::nn::SELUOptions;
using torch::nn::SmoothL1LossOptions;
using torch::nn::SoftMarginLossOptions;
using torch::nn::SoftmaxOptions;
using torch::nn::SoftminOptions;
using torch::nn::SoftplusOptions;
using torch::nn::SoftshrinkOptions;
using torch::nn::ThresholdOptions;
using torch::nn::TransformerDecoderLayerOptions;
using torch::nn::TransformerDecoderOptions;
using torch::nn::TransformerEncoderLayerOptions;
using torch::nn::TransformerEncoderOptions;
using torch::nn::TransformerOptions;
using torch::nn::TripletMarginLossOptions;
using torch::nn::TripletMarginWithDistanceLossOptions;
using torch::nn::UnflattenOptions;
using torch::nn::UnfoldOptions;
using torch::nn::UpsampleOptions;
using torch::nn::ZeroPad2dOptions;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
using torch::nn::ZeroPad1dOptions;
using torch::nn::ZeroPad3dOptions;
using torch::nn::ZeroPadOptions;
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
using torch::nn::LPPool3dOptions;
#endif

/// \addtogroup api_nn
/// @{

/// The hook-aware holder of `torch::nn::EmbeddingImpl`. libtorch writes this holder and
/// `EmbeddingBag`'s by hand for their static `from_pretrained`, so they are written by hand here
/// too; the other holders of `modhooks::nn` come from one macro over their names.
///
/// **Example**:
/// \code
///   modhooks::nn::Embedding emb(10, 3);
///   at::Tensor v = emb(torch::tensor({1, 4}));  // emb's hooks fire
/// \endcode
class Embedding : public ModuleHolder<torch::nn::EmbeddingImpl> {
 public:
  using ModuleHolder<torch::nn::EmbeddingImpl>::ModuleHolder;
  /// The module type held, as in libtorch's holders.
  using Impl = torch::nn::EmbeddingImpl;

  /// libtorch's `Embedding::from_pretrained`, in a hook-aware holder.
  ///
  /// **Example**:
  /// \code
  ///   auto emb = modhooks::nn::Embedding::from_pretrained(torch::randn({10, 3}));
  /// \endcode
  static Embedding from_pretrained(const torch::Tensor& embeddings,
                                   const EmbeddingFromPretrainedOptions& options = {}) {
    return Embedding(torch::nn::Embedding::from_pretrained(embeddings, options));
  }
};

/// The hook-aware holder of `torch::nn::EmbeddingBagImpl` (see `Embedding`).
///
/// **Example**:
/// \code
///   modhooks::nn::EmbeddingBag bag(10, 3);
///   at::Tensor v = bag(torch::tensor({{1, 4}}));  // bag's hooks fire
/// \endcode
class EmbeddingBag : public ModuleHolder<torch::nn::EmbeddingBagImpl> {
 public:
  using ModuleHolder<torch::nn::EmbeddingBagImpl>::ModuleHolder;
  /// The module type held, as in libtorch's holders.
  using Impl = torch::nn::EmbeddingBagImpl;

  /// libtorch's `EmbeddingBag::from_pretrained`, in a hook-aware holder.
  ///
  /// **Example**:
  /// \code
  ///   auto bag = modhooks::nn::EmbeddingBag::from_pretrained(torch::randn({10, 3}));
  /// \endcode
  static EmbeddingBag from_pretrained(const torch::Tensor& embeddings,
                                      const EmbeddingBagFromPretrainedOptions& options = {}) {
    return EmbeddingBag(torch::nn::EmbeddingBag::from_pretrained(embeddings, options));
  }
};

/// @}

namespace detail {

template <class Holder>
const char* holder_name(const char* name) {
  static_assert(std::is_base_of_v<ModuleHolder<typename Holder::Impl>, Holder>,
                "a modhooks::nn holder must fire hooks");
  return name;
}

/// The names of the holders above, for the test that compares them with libtorch's headers.
/// Each entry names its class, so a name cannot outlive its holder.
inline const std::vector<std::string>& holder_names() {
#define MODHOOKS_NN_NAME(Name) holder_name<Name>(#Name),
  // clang-format off
  static const std::vector<std::string> names{
      MODHOOKS_NN_HOLDERS_1_13(MODHOOKS_NN_NAME)
      MODHOOKS_NN_HOLDERS_2_1(MODHOOKS_NN_NAME)
      MODHOOKS_NN_HOLDERS_2_2(MODHOOKS_NN_NAME)
      MODHOOKS_NN_NAME(Embedding)
      MODHOOKS_NN_NAME(EmbeddingBag)};
  // clang-format on
#undef MODHOOKS_NN_NAME
  return names;
}

}  // namespace detail
}  // namespace nn
MODHOOKS_END_NAMESPACE

#undef MODHOOKS_NN_HOLDERS_1_13
#undef MODHOOKS_NN_HOLDERS_2_1
#undef MODHOOKS_NN_HOLDERS_2_2
