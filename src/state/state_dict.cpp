// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <string>

#include "modhooks/core/error.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

StateDict StateDict::from(const c10::IValue& value) {
  if (!value.isGenericDict()) {
    detail::fail<TypeError>("state.state_dict.not_a_dict",
                            std::string("StateDict::from: the value is a ") + value.tagKind() +
                                ", not a mapping of names to tensors");
  }
  const c10::impl::GenericDict dict = value.toGenericDict();
  StateDict sd;
  sd.reserve(dict.size());
  for (const auto& entry : dict) {
    if (!entry.key().isString()) {
      detail::fail<TypeError>(
          "state.state_dict.key_not_str",
          std::string("StateDict::from: a key is a ") + entry.key().tagKind() + ", not a str");
    }
    const std::string& key = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      detail::fail<TypeError>("state.state_dict.entry_not_tensor",
                              "StateDict::from: entry '" + key + "' is a " +
                                  entry.value().tagKind() + ", not a tensor");
    }
    sd.insert_or_assign(key, entry.value().toTensor());
  }
  return sd;
}

c10::IValue StateDict::to_ivalue() const {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.reserve(size());
  for (const auto& [key, tensor] : *this) dict.insert(key, tensor);
  return c10::IValue(dict);
}

MODHOOKS_END_NAMESPACE
