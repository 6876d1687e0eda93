// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "records.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <libdeflate.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/state/detail/texts.h"
#include "statistics.h"
#include "writer.h"

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {
namespace {

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
    // One host copy serves the CRC and the file, taken now so that a later in-place update
    // cannot reach the file; the CRC alone reads a CPU tensor where it is (a negative or
    // conjugate view's bytes are not its values: those are copied).
    at::Tensor host = files ? writer->copy(tensor)
                      : tensor.is_cpu() && !tensor.is_neg() && !tensor.is_conj()
                          ? tensor.detach().contiguous()
                          : tensor.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true,
                                               at::MemoryFormat::Contiguous);
    if (md5) record["md5"] = crc32_hex(host);
    if (files) {
      record["data_name"] = data_name;
      writer->write(std::move(host), folder + "/" + data_name);
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
