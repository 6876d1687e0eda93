// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "python_json.h"

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {

class TensorWriter;

/// How records are made: which extras a tensor's record carries, and where tensor files go.
struct RecordMaker {
  bool md5 = false;                // a "md5" key (msprobe's CRC-32) after "requires_grad"
  bool files = false;              // task "tensor": a "data_name" key and the file in `folder`
  std::string folder;              // dump_tensor_data/
  TensorWriter* writer = nullptr;  // writes the files (task "tensor")

  /// msprobe's record of one tensor; `data_name` is its file's name (task "tensor").
  Json tensor(const at::Tensor& tensor, const std::string& data_name) const;
  /// The record of an argument or output: a tensor's, a number's or string's
  /// (`{"type": "float", "value": 1.0}`), null for None, a list for a list or tuple (its items'
  /// file names get `.<i>`). `stem` is the file name without ".pt".
  Json value(const c10::IValue& value, const std::string& stem) const;
};

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
