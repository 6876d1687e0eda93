// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/nn/utils/prune.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <array>
#include <charconv>
#include <cmath>

#include "attributes.h"
#include "modhooks/core/error.h"
#include "modhooks/state/detail/texts.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::prune {
namespace {

using at::indexing::Slice;
using at::indexing::TensorIndex;
using modhooks::detail::fail;
using modhooks::detail::torch_size;

/// Python's ValueError for an `amount` that is neither a fraction in [0, 1] nor a count.
[[noreturn]] void fail_out_of_range(const std::string& amount) {
  fail<ValueError>("nn.utils.prune.amount",
                   "amount=" + amount +
                       " should either be a float in the range [0, 1] or a non-negative integer");
}

/// Python's TypeError where `name` is a buffer or plain tensor: `name_orig` must be a Parameter.
[[noreturn]] void fail_not_a_parameter(const std::string& name) {
  fail<TypeError>("nn.utils.prune.not_a_parameter",
                  "cannot assign the tensor '" + name + "' to parameter '" + name +
                      "_orig' (torch.nn.Parameter or None required): it is not a parameter");
}

/// Python's `_validate_structured_pruning(t)`.
void check_structured(const at::Tensor& t) {
  if (t.dim() <= 1) {
    fail<ValueError>("nn.utils.prune.not_multidimensional",
                     "Structured pruning can only be applied to multidimensional tensors. Found "
                     "tensor of shape " +
                         torch_size(t.sizes()) + " with " + std::to_string(t.dim()) + " dims");
  }
}

/// Python's `_validate_pruning_dim(t, dim)`; returns `dim` counted from the front.
std::int64_t checked_dim(const at::Tensor& t, std::int64_t dim) {
  if (dim >= t.dim()) {
    fail<IndexError>("nn.utils.prune.dim", "Invalid index " + std::to_string(dim) +
                                               " for tensor of size " + torch_size(t.sizes()));
  }
  const std::int64_t front = dim < 0 ? dim + t.dim() : dim;
  if (front < 0) {
    fail<IndexError>("nn.utils.prune.dim", "Index is out of bounds for tensor with dimensions " +
                                               std::to_string(t.dim()));
  }
  return front;
}

/// Python's `[slice(None)] * ndim` with `index` at `dim`.
/// Each index is made in its place: libtorch 1.13's `TensorIndex` of a tensor leaves its integer
/// and boolean members unset, and GCC 12 (-Werror) reports a move of one that reads them.
std::vector<TensorIndex> along(std::int64_t ndim, std::int64_t dim, const at::Tensor& index) {
  std::vector<TensorIndex> slices;
  slices.reserve(static_cast<std::size_t>(ndim));
  for (std::int64_t d = 0; d < ndim; ++d) {
    if (d == dim) {
      slices.emplace_back(index);
    } else {
      slices.emplace_back(Slice());
    }
  }
  return slices;
}

/// What both structured methods check and count first: the dimension (from the front), the
/// channels along it, how many to prune.
struct ChannelCount {
  std::int64_t dim, channels, count;
};
ChannelCount count_channels(const at::Tensor& t, std::int64_t dim, const Amount& amount) {
  check_structured(t);
  const std::int64_t front = checked_dim(t, dim);
  const std::int64_t channels = t.size(front);
  const std::int64_t count = amount.of(channels);
  amount.check(channels);
  return {front, channels, count};
}

/// A mask of `t`'s shape that keeps the channels `index` selects along `dim`, and nothing
/// `default_mask` already pruned.
at::Tensor keep_channels(const at::Tensor& t, std::int64_t dim, const at::Tensor& index,
                         const at::Tensor& default_mask) {
  at::Tensor mask = at::zeros_like(t);
  mask.index_put_(along(t.dim(), dim, index), 1);
  mask *= default_mask.to(mask.scalar_type());
  return mask;
}

/// Python's `_compute_norm(t, n, dim)`.
at::Tensor channel_norms(const at::Tensor& t, const NormOrder& n, std::int64_t dim) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (d != dim) dims.push_back(d);
  }
  const bool matrix = dims.size() == 2;
  if (const auto* name = std::get_if<std::string>(&n.value())) {
    if (*name == "nuc" || (*name == "fro" && matrix)) {
      return at::linalg_matrix_norm(t, *name,
                                    matrix ? at::IntArrayRef(dims) : at::IntArrayRef({-2, -1}));
    }
    if (*name != "fro") {
      fail<ValueError>("nn.utils.prune.norm",
                       "Invalid norm order '" + *name + "': a number, 'fro' or 'nuc'");
    }
    return at::linalg_vector_norm(t, 2, dims);
  }
  return at::linalg_vector_norm(t, std::get<double>(n.value()), dims);
}

/// What both unstructured methods do: `default_mask` with the `amount` entries of `t` that
/// rank first in `ranking()` (the largest or the smallest) set to 0. `ranking` runs only when
/// something is pruned, as in Python (a random ranking draws from the generator).
template <class Ranking>
at::Tensor drop_entries(const Amount& amount, const at::Tensor& t, const at::Tensor& default_mask,
                        Ranking&& ranking, bool largest) {
  const std::int64_t size = t.numel();
  const std::int64_t count = amount.of(size);
  amount.check(size);
  at::Tensor mask = default_mask.clone(at::MemoryFormat::Contiguous);
  if (count != 0) {
    const at::Tensor indices = std::get<1>(at::topk(ranking().view(-1), count, -1, largest));
    mask.view(-1).index_put_({indices}, 0);
  }
  return mask;
}

/// The pruned tensor of a module: `name = name_orig * name_mask` (Python's `apply_mask`).
struct Pruned final : utils::detail::Applied {
  Pruned(std::string tensor_name, utils::detail::Member where,
         std::shared_ptr<const BasePruningMethod> pruning)
      : Applied(std::move(tensor_name), where),
        orig_key(name + "_orig"),
        mask_key(name + "_mask"),
        method(std::move(pruning)) {}
  at::Tensor compute(torch::nn::Module& module) override {
    const at::Tensor& orig = utils::detail::parameters_of(module)[orig_key];
    return utils::detail::buffers_of(module)[mask_key].to(orig.scalar_type()) * orig;
  }
  std::vector<std::pair<std::string, utils::detail::Attribute>> added() const override {
    return {{orig_key, utils::detail::Attribute::kParameter},
            {mask_key, utils::detail::Attribute::kBuffer}};
  }
  /// The same pruning (the method itself: its history decides the next pruning's), on a mask of
  /// ones that the state dict loaded after replaces.
  void apply_to(torch::nn::Module& copy) const override;
  std::string orig_key, mask_key;  // looked up at each forward, as Python's getattr does
  std::shared_ptr<const BasePruningMethod> method;
};

void Pruned::apply_to(torch::nn::Module& copy) const {
  namespace ud = utils::detail;
  auto utilities = ud::utilities_for(copy);
  const at::Tensor orig = ud::parameters_of(copy)[name];
  const ud::Member where = ud::member_for(copy, name, orig);
  ud::take_parameter(copy, name);
  ud::put_parameter(copy, orig_key, orig, orig.requires_grad());
  ud::put_buffer(copy, mask_key, at::ones_like(orig));
  ud::install(copy, *utilities, std::make_shared<Pruned>(name, where, method));
}

bool has_pruned(const torch::nn::Module& module) {
  if (auto utilities = utils::detail::find_utilities(module)) {
    for (const auto& applied : utilities->applied) {
      if (std::dynamic_pointer_cast<Pruned>(applied)) return true;
    }
  }
  for (const auto& child : module.children()) {
    if (has_pruned(*child)) return true;
  }
  return false;
}

}  // namespace

Amount::Amount(double fraction) : value_(fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) fail_out_of_range(str());
}

Amount::Amount(std::int64_t count, CountTag) : value_(count) {
  if (count < 0) fail_out_of_range(str());
}

std::int64_t Amount::of(std::int64_t size) const {
  if (const auto* count = std::get_if<std::int64_t>(&value_)) return *count;
  // Python's round(): halves to even, which nearbyint does in the default rounding mode.
  return static_cast<std::int64_t>(
      std::nearbyint(std::get<double>(value_) * static_cast<double>(size)));
}

void Amount::check(std::int64_t size) const {
  const auto* count = std::get_if<std::int64_t>(&value_);
  if (count && *count > size) {
    fail<ValueError>("nn.utils.prune.amount",
                     "amount=" + str() +
                         " should be smaller than the number of parameters to "
                         "prune=" +
                         std::to_string(size));
  }
}

std::string Amount::str() const {
  if (const auto* count = std::get_if<std::int64_t>(&value_)) return std::to_string(*count);
  // Python's repr of a float: the shortest text that reads back, with ".0" where it is whole.
  std::array<char, 32> buffer{};
  const auto [end, error] =
      std::to_chars(buffer.data(), buffer.data() + buffer.size(), std::get<double>(value_));
  std::string text(buffer.data(), error == std::errc() ? end : buffer.data());
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

at::Tensor BasePruningMethod::prune(const at::Tensor& t, const at::Tensor& default_mask,
                                    const at::Tensor& importance_scores) const {
  if (importance_scores.defined() && !importance_scores.sizes().equals(t.sizes())) {
    fail<ValueError>("nn.utils.prune.importance_scores",
                     "importance_scores should have the same shape as tensor t, got " +
                         torch_size(importance_scores.sizes()) + " vs " + torch_size(t.sizes()));
  }
  const at::Tensor& scores = importance_scores.defined() ? importance_scores : t;
  return t * compute_mask(scores, default_mask.defined() ? default_mask : at::ones_like(t));
}

at::Tensor IdentityMethod::compute_mask(const at::Tensor&, const at::Tensor& default_mask) const {
  return default_mask;
}

at::Tensor RandomUnstructuredMethod::compute_mask(const at::Tensor& t,
                                                  const at::Tensor& default_mask) const {
  return drop_entries(
      amount_, t, default_mask, [&] { return at::rand_like(t); }, true);
}

at::Tensor L1UnstructuredMethod::compute_mask(const at::Tensor& t,
                                              const at::Tensor& default_mask) const {
  return drop_entries(
      amount_, t, default_mask, [&] { return at::abs(t); }, false);
}

at::Tensor RandomStructuredMethod::compute_mask(const at::Tensor& t,
                                                const at::Tensor& default_mask) const {
  const ChannelCount c = count_channels(t, dim_, amount_);
  if (c.count == 0) return default_mask;
  const at::Tensor prob = at::rand({c.channels});
  const at::Tensor threshold = std::get<0>(at::kthvalue(prob, c.count));
  return keep_channels(t, c.dim, prob > threshold, default_mask);
}

at::Tensor LnStructuredMethod::compute_mask(const at::Tensor& t,
                                            const at::Tensor& default_mask) const {
  const ChannelCount c = count_channels(t, dim_, amount_);
  const at::Tensor norm = channel_norms(t, n_, c.dim);
  const at::Tensor kept = std::get<1>(at::topk(norm, c.channels - c.count, -1, /*largest=*/true));
  if (c.count == 0) return default_mask;
  return keep_channels(t, c.dim, kept, default_mask);
}

at::Tensor CustomFromMaskMethod::compute_mask(const at::Tensor&,
                                              const at::Tensor& default_mask) const {
  if (!default_mask.sizes().equals(mask_.sizes())) {
    fail<ValueError>("nn.utils.prune.mask_shape",
                     "default_mask shape " + torch_size(default_mask.sizes()) +
                         " must match self.mask shape " + torch_size(mask_.sizes()));
  }
  return default_mask * mask_.to(default_mask.scalar_type());
}

at::Tensor PruningContainer::compute_mask(const at::Tensor& t,
                                          const at::Tensor& default_mask) const {
  if (methods_.empty()) {
    fail<ValueError>("nn.utils.prune.empty_container", "PruningContainer holds no method");
  }
  const BasePruningMethod& method = *methods_.back();
  at::Tensor new_mask = default_mask.to(t.scalar_type());
  switch (method.pruning_type()) {
    case PruningType::kUnstructured: {
      const at::Tensor kept = default_mask == 1;
      const at::Tensor partial = method.compute_mask(t.index({kept}), default_mask.index({kept}));
      new_mask.index_put_({kept}, partial.to(new_mask.scalar_type()));
      break;
    }
    case PruningType::kStructured: {
      const std::optional<std::int64_t> method_dim = method.dim();
      if (!method_dim) {
        fail<AttributeError>("nn.utils.prune.no_dim",
                             "Pruning methods of PRUNING_TYPE \"structured\" need to have the "
                             "attribute `dim` defined.");
      }
      std::int64_t dim = *method_dim < 0 ? *method_dim + t.dim() : *method_dim;
      if (dim < 0) {
        fail<IndexError>(
            "nn.utils.prune.dim",
            "Index is out of bounds for tensor with dimensions " + std::to_string(t.dim()));
      }
      std::vector<std::int64_t> others;
      for (std::int64_t d = 0; d < t.dim(); ++d) {
        if (d != dim) others.push_back(d);
      }
      const at::Tensor keep_channel = default_mask.sum(others) != 0;
      const auto slices = along(t.dim(), dim, keep_channel);
      const at::Tensor partial = method.compute_mask(t.index(slices), default_mask.index(slices));
      new_mask.index_put_(slices, partial.to(new_mask.scalar_type()));
      break;
    }
    case PruningType::kGlobal:
      new_mask.copy_(method.compute_mask(t, default_mask).to(new_mask.scalar_type()));
      break;
  }
  return new_mask;
}

namespace detail {

void apply(torch::nn::Module& module, const std::string& name,
           const std::shared_ptr<const BasePruningMethod>& method,
           const at::Tensor& importance_scores) {
  namespace ud = utils::detail;
  auto utilities = ud::utilities_for(module);
  const auto old = ud::find_applied<Pruned>(module, name);
  // Python's `_get_composite_method`, without changing the old container: a failure below
  // leaves the module as it was.
  std::shared_ptr<const BasePruningMethod> combined = method;
  if (old) {
    auto container = std::make_shared<PruningContainer>();
    if (const auto* previous = dynamic_cast<const PruningContainer*>(old->method.get())) {
      *container = *previous;
    } else {
      container->add_pruning_method(old->method);
    }
    container->add_pruning_method(method);
    combined = container;
  }
  const at::Tensor orig = ud::get_tensor(module, name);
  if (importance_scores.defined() && !importance_scores.sizes().equals(orig.sizes())) {
    fail<ValueError>("nn.utils.prune.importance_scores",
                     "importance_scores should have the same shape as parameter " + name + " of " +
                         ud::module_repr(module) + ", got " +
                         torch_size(importance_scores.sizes()) + " vs " + torch_size(orig.sizes()));
  }
  const at::Tensor& scores = importance_scores.defined() ? importance_scores : orig;
  at::Tensor default_mask;
  if (old) {
    default_mask =
        ud::buffers_of(module)[name + "_mask"].detach().clone(at::MemoryFormat::Contiguous);
  } else {
    if (!ud::parameters_of(module).contains(name)) {
      fail_not_a_parameter(name);
    }
    default_mask = at::ones_like(orig);
  }
  const ud::Member member = old ? old->member : ud::member_for(module, name, orig);
  const at::Tensor mask = combined->compute_mask(scores, default_mask);
  if (!old) {
    ud::check_free(module, name + "_orig", ud::Attribute::kParameter);
    ud::check_free(module, name + "_mask", ud::Attribute::kBuffer);
  }
  // Computed and checked: from here on the module changes.
  if (old) {
    ud::uninstall(module, old);
  } else {
    // Python registers the Parameter object itself as `name_orig`.
    ud::take_parameter(module, name);
    ud::put_parameter(module, name + "_orig", orig, orig.requires_grad());
  }
  ud::put_buffer(module, name + "_mask", mask);
  ud::install(module, *utilities, std::make_shared<Pruned>(name, member, std::move(combined)));
}

void remove(torch::nn::Module& module, const std::string& name) {
  namespace ud = utils::detail;
  auto applied = ud::applied_or_fail<Pruned>(module, name, "nn.utils.prune.not_pruned", [&] {
    return "Parameter '" + name + "' of module " + ud::module_repr(module) +
           " has to be pruned before pruning can be removed";
  });
  const at::Tensor weight = applied->compute(module);
  // Python's `orig.data = weight.data`: the Parameter object is `name` again.
  at::Tensor orig = ud::parameters_of(module)[name + "_orig"];
  orig.set_data(weight.detach());
  ud::restore_parameter(module, applied, {name + "_orig", name + "_mask"}, orig,
                        orig.requires_grad());
}

bool is_pruned(const torch::nn::Module& module) { return has_pruned(module); }

void global_unstructured(const std::vector<std::pair<Target, std::string>>& parameters,
                         std::shared_ptr<const BasePruningMethod> method,
                         const std::vector<at::Tensor>& importance_scores) {
  namespace ud = utils::detail;
  if (!importance_scores.empty() && importance_scores.size() != parameters.size()) {
    fail<ValueError>("nn.utils.prune.importance_scores",
                     "global_unstructured(): importance_scores has " +
                         std::to_string(importance_scores.size()) + " tensors for " +
                         std::to_string(parameters.size()) + " parameters");
  }
  if (method->pruning_type() != PruningType::kUnstructured) {
    fail<TypeError>(
        "nn.utils.prune.not_unstructured",
        "Only \"unstructured\" PRUNING_TYPE supported for the `pruning_method`. "
        "Found a method of type " +
            std::string(method->pruning_type() == PruningType::kStructured ? "structured"
                                                                           : "global"));
  }
  std::vector<at::Tensor> scores, masks, tensors;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    torch::nn::Module& module = parameters[i].first.module();
    const std::string& name = parameters[i].second;
    const at::Tensor tensor = ud::get_tensor(module, name);
    // What custom_from_mask will need of each, checked before any is pruned.
    ud::utilities_for(module);
    if (!ud::parameters_of(module).contains(name) && !ud::find_applied<Pruned>(module, name)) {
      fail_not_a_parameter(name);
    }
    if (!ud::find_applied<Pruned>(module, name)) ud::member_for(module, name, tensor);
    tensors.push_back(tensor);
    const bool scored = !importance_scores.empty() && importance_scores[i].defined();
    scores.push_back((scored ? importance_scores[i] : tensor).view(-1));
    const at::Tensor* mask = ud::buffers_of(module).find(name + "_mask");
    masks.push_back((mask ? *mask : at::ones_like(tensor)).view(-1));
  }
  PruningContainer container({std::move(method)});
  const at::Tensor final_mask = container.compute_mask(at::cat(scores), at::cat(masks));
  std::int64_t pointer = 0;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const std::int64_t count = tensors[i].numel();
    const at::Tensor mask = final_mask.slice(0, pointer, pointer + count).view_as(tensors[i]);
    apply(parameters[i].first.module(), parameters[i].second,
          std::make_shared<CustomFromMaskMethod>(mask), {});
    pointer += count;
  }
}

}  // namespace detail
}  // namespace nn::utils::prune
MODHOOKS_END_NAMESPACE
