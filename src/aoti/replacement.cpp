// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "replacement.h"

#include <cstddef>
#include <string>

#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

std::string describe(const at::Tensor& t) {
  std::string sizes;
  for (auto s : t.sizes()) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  return std::string(c10::toString(t.scalar_type())) + "[" + sizes + "] on " + t.device().str();
}

}  // namespace

std::vector<at::Tensor> replacement(const aoti::Point& point, const char* what,
                                    const c10::IValue& value, at::TensorList expected,
                                    bool single) {
  std::vector<at::Tensor> got;
  if (single && value.isTensor()) {
    got.push_back(value.toTensor());
  } else if (!single && (value.isTuple() || value.isTensorList() || value.isList())) {
    for (const auto& v :
         value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec()) {
      if (!v.isTensor()) {
        fail<TypeError>("aoti.hook.bad_replacement",
                        "modhooks: a hook on point '" + point.name() + "' returned a " + what +
                            " holding a " + v.tagKind() + "; the compiled graph holds tensors");
      }
      got.push_back(v.toTensor());
    }
  } else {
    fail<TypeError>("aoti.hook.bad_replacement",
                    "modhooks: a hook on point '" + point.name() + "' returned a " +
                        value.tagKind() + " as its " + what + "; the compiled graph holds " +
                        (single ? std::string("a tensor")
                                : std::to_string(expected.size()) + " tensors (a tuple)"));
  }
  if (got.size() != expected.size()) {
    fail<TypeError>("aoti.hook.bad_replacement",
                    "modhooks: a hook on point '" + point.name() + "' returned " +
                        std::to_string(got.size()) + " tensors as its " + what +
                        "; the compiled graph holds " + std::to_string(expected.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const at::Tensor& g = got[i];
    const at::Tensor& e = expected[i];
    if (!g.defined() || g.sizes() != e.sizes() || g.scalar_type() != e.scalar_type() ||
        g.device() != e.device()) {
      fail<ValueError>("aoti.hook.replacement_mismatch",
                       "modhooks: a hook on point '" + point.name() + "' replaced " + what +
                           " tensor " + std::to_string(i) + " with " +
                           (g.defined() ? describe(g) : std::string("an undefined tensor")) +
                           "; the compiled graph expects " + describe(e));
    }
  }
  return got;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
