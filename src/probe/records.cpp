// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "records.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <libdeflate.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/state/detail/texts.h"
#include "writer.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {
namespace {

/// Max, Min, Mean and Norm as msprobe takes them: in the tensor's own dtype and on its own
/// device (max and min in one pass), the four stacked so that one small copy reaches the host.
void add_statistics(const at::Tensor& tensor, Json& record) {
  Json max, min, mean, norm;  // null unless set
  const c10::ScalarType type = tensor.scalar_type();
  const bool low_float = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  if (tensor.numel() == 0 || at::isComplexType(type)) {
    // msprobe leaves all four None
  } else if (tensor.dim() == 0 && (low_float || type == at::kDouble)) {
    const double v = tensor.to(at::kDouble).item<double>();
    max = min = mean = norm = v;
  } else if (low_float) {
    const auto [lowest, highest] = at::aminmax(tensor);
    const at::Tensor four =
        at::stack({highest, lowest, tensor.mean(), tensor.norm()}).to(at::kDouble).cpu();
    const double* v = four.data_ptr<double>();
    max = v[0];
    min = v[1];
    mean = v[2];
    norm = v[3];
  } else if (type == at::kDouble) {
    const at::Tensor two = at::stack({tensor.max(), tensor.min()}).cpu();
    max = two[0].item<double>();
    min = two[1].item<double>();
  } else if (type == at::kBool) {
    const at::Tensor two = at::stack({tensor.any(), tensor.all()}).cpu();
    max = two[0].item<bool>();
    min = two[1].item<bool>();
  } else {
    const at::Tensor two = at::stack({tensor.max(), tensor.min()}).to(at::kLong).cpu();
    max = two[0].item<int64_t>();
    min = two[1].item<int64_t>();
  }
  record["Max"] = max;
  record["Min"] = min;
  record["Mean"] = mean;
  record["Norm"] = norm;
}

/// msprobe's "md5": `"%08x" % zlib.crc32(bytes)` of the contiguous tensor in its own dtype.
std::string crc32_hex(const at::Tensor& host) {
  const uint32_t crc = libdeflate_crc32(0, host.data_ptr(), host.nbytes());
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

}  // namespace

Json RecordMaker::tensor(const at::Tensor& tensor, const std::string& data_name) const {
  const at::NoGradGuard no_grad;
  Json record;
  record["type"] = "torch.Tensor";
  record["dtype"] = modhooks::detail::python_dtype(tensor.scalar_type());
  record["shape"] = tensor.sizes().vec();
  add_statistics(tensor, record);
  record["requires_grad"] = tensor.requires_grad();
  if (md5 || files) {
    // One host copy serves the CRC and the file; a CPU tensor is cloned so that a later
    // in-place update cannot reach the file.
    const at::Tensor host =
        tensor.is_cpu() ? tensor.detach().contiguous().clone() : tensor.detach().cpu().contiguous();
    if (md5) record["md5"] = crc32_hex(host);
    if (files) {
      record["data_name"] = data_name;
      writer->write(host, folder + "/" + data_name);
    }
  }
  return record;
}

Json RecordMaker::value(const c10::IValue& value, const std::string& stem) const {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) return nullptr;
    return tensor(t, stem + ".pt");
  }
  if (value.isNone()) return nullptr;
  if (value.isDouble()) return Json{{"type", "float"}, {"value", value.toDouble()}};
  if (value.isBool()) return Json{{"type", "bool"}, {"value", value.toBool()}};
  if (value.isInt()) return Json{{"type", "int"}, {"value", value.toInt()}};
  if (value.isString()) return Json{{"type", "str"}, {"value", value.toStringRef()}};
  if (value.isList() || value.isTuple()) {
    const std::vector<c10::IValue> items =
        value.isList() ? value.toListRef().vec() : value.toTupleRef().elements().vec();
    Json list = Json::array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      list.push_back(this->value(items[i], stem + "." + std::to_string(i)));
    }
    return list;
  }
  return nullptr;
}

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
