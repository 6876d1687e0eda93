// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/points/detail/replacement.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <string>

#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.storage().data());
  const auto* b0 = static_cast<const char*>(b.storage().data());
  return a0 < b0 + b.storage().nbytes() && b0 < a0 + a.storage().nbytes();
}

std::string describe(const at::Tensor& t) {
  std::string sizes;
  for (auto s : t.sizes()) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  return std::string(c10::toString(t.scalar_type())) + "[" + sizes + "] on " + t.device().str();
}

}  // namespace

std::vector<at::Tensor> replacement(const std::string& point, const PointErrorIds& ids,
                                    const char* what, const c10::IValue& value,
                                    at::TensorList expected, bool single) {
  std::vector<at::Tensor> got;
  if (single && value.isTensor()) {
    got.push_back(value.toTensor());
  } else if (!single && (value.isTuple() || value.isTensorList() || value.isList())) {
    for (const auto& v :
         value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec()) {
      if (!v.isTensor()) {
        fail<TypeError>(ids.bad_replacement,
                        "modhooks: a hook on point '" + point + "' returned a " + what +
                            " holding a " + v.tagKind() + "; the compiled graph holds tensors");
      }
      got.push_back(v.toTensor());
    }
  } else {
    fail<TypeError>(ids.bad_replacement,
                    "modhooks: a hook on point '" + point + "' returned a " + value.tagKind() +
                        " as its " + what + "; the compiled graph holds " +
                        (single ? std::string("a tensor")
                                : std::to_string(expected.size()) + " tensors (a tuple)"));
  }
  if (got.size() != expected.size()) {
    fail<TypeError>(ids.bad_replacement, "modhooks: a hook on point '" + point + "' returned " +
                                             std::to_string(got.size()) + " tensors as its " +
                                             what + "; the compiled graph holds " +
                                             std::to_string(expected.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const at::Tensor& g = got[i];
    const at::Tensor& e = expected[i];
    if (!g.defined() || g.sizes() != e.sizes() || g.scalar_type() != e.scalar_type() ||
        g.device() != e.device()) {
      fail<ValueError>(ids.replacement_mismatch,
                       "modhooks: a hook on point '" + point + "' replaced " + what + " tensor " +
                           std::to_string(i) + " with " +
                           (g.defined() ? describe(g) : std::string("an undefined tensor")) +
                           "; the compiled graph expects " + describe(e));
    }
  }
  return got;
}

void write_copies(at::TensorList outs, at::TensorList xs) {
  for (std::size_t i = 0; i < outs.size(); ++i) const_cast<at::Tensor&>(outs[i]).copy_(xs[i]);
}

void write_replacement(at::TensorList targets, const std::vector<at::Tensor>* values) {
  if (!values) return;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    at::Tensor value = (*values)[i];
    if (overlaps(value, targets[i])) value = value.clone();
    const_cast<at::Tensor&>(targets[i]).copy_(value);
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
