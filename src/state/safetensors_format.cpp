// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "byte_io.h"
#include "dtypes.h"
#include "formats.h"
#include "modhooks/core/error.h"

namespace modhooks {
namespace detail {
namespace {

using Json = nlohmann::ordered_json;

/// The safetensors library refuses larger headers; so does modhooks, before allocating one.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

struct Entry {
  std::string name;
  c10::ScalarType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::uint64_t non_negative(const Json& value, const std::string& name, const char* field) {
  if (!value.is_number_unsigned() &&
      !(value.is_number_integer() && value.get<std::int64_t>() >= 0)) {
    fail("tensor '" + name + "': " + field + " holds a " + value.type_name() +
         ", not a non-negative integer");
  }
  return value.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const Json& info) {
  if (!info.is_object()) fail("tensor '" + name + "': header entry is not an object");
  const auto dtype = info.find("dtype");
  const auto shape = info.find("shape");
  const auto offsets = info.find("data_offsets");
  if (dtype == info.end() || !dtype->is_string()) fail("tensor '" + name + "': no dtype string");
  if (shape == info.end() || !shape->is_array()) fail("tensor '" + name + "': no shape array");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
    fail("tensor '" + name + "': data_offsets is not a [begin, end] pair");
  }
  const DtypeNames* names = find_dtype_by_safetensors_name(dtype->get_ref<const std::string&>());
  if (names == nullptr) {
    fail("tensor '" + name + "': dtype '" + dtype->get<std::string>() +
         "' is not one this libtorch has");
  }
  Entry entry{name,
              names->type,
              {},
              non_negative((*offsets)[0], name, "data_offsets"),
              non_negative((*offsets)[1], name, "data_offsets")};
  if (entry.end < entry.begin) fail("tensor '" + name + "': data_offsets end before they begin");
  std::uint64_t nbytes = c10::elementSize(entry.dtype);
  for (const Json& dim : *shape) {
    const std::uint64_t size = non_negative(dim, name, "shape");
    if (size > INT64_MAX || mul_overflows(nbytes, size, &nbytes)) {
      fail("tensor '" + name + "': shape overflows");
    }
    entry.shape.push_back(static_cast<std::int64_t>(size));
  }
  if (nbytes != entry.end - entry.begin) {
    fail("tensor '" + name + "': shape " + shape->dump() + " of " + dtype->get<std::string>() +
         " needs " + std::to_string(nbytes) + " bytes, data_offsets span " +
         std::to_string(entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

StateDict read_safetensors(const caffe2::serialize::ReadAdapterInterface& in) {
  const std::uint64_t file_size = in.size();
  if (file_size < 8) {
    fail("not a safetensors file: " + std::to_string(file_size) +
         " bytes is too short for the header length");
  }
  unsigned char length_bytes[8];
  read_exactly(in, 0, length_bytes, 8, "safetensors header length");
  const std::uint64_t header_size = load_le(length_bytes, 8);
  if (header_size > file_size - 8 || header_size > kMaxHeaderSize) {
    fail("safetensors header length " + std::to_string(header_size) + " exceeds the " +
         std::to_string(file_size - 8) + " bytes after it (or the 100 MB limit)");
  }
  std::string text(static_cast<std::size_t>(header_size), '\0');
  read_exactly(in, 8, text.data(), text.size(), "safetensors header");
  if (text.empty() || text[0] != '{') fail("safetensors header does not start with '{'");
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail("safetensors header is not a JSON object");

  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail("safetensors __metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) fail("safetensors __metadata__['" + key + "'] is not a string");
      }
      continue;
    }
    entries.push_back(parse_entry(name, info));
  }
  // The tensors must tile the data area exactly: sorted by offset, each starts where the
  // previous ends, the last ends at the end of the file.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t data_start = 8 + header_size;
  const std::uint64_t data_size = file_size - data_start;
  std::uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      fail("tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) +
           ", expected " + std::to_string(expected) + " (tensors must not overlap or leave gaps)");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    fail("safetensors tensors cover " + std::to_string(expected) + " bytes, but " +
         std::to_string(data_size) + " bytes of data follow the header");
  }
  StateDict sd;
  sd.reserve(entries.size());
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    read_exactly(in, data_start + e.begin, t.data_ptr(), e.end - e.begin, "safetensors data");
    sd.insert_or_assign(e.name, std::move(t));
  }
  return sd;
}

void write_safetensors(const StateDict& state_dict, Sink& out) {
  Json header = Json::object();
  std::uint64_t offset = 0;
  for (const auto& [key, tensor] : state_dict) {
    const DtypeNames& names = checked_dtype(key, tensor);
    if (names.safetensors_name.empty()) {
      fail("state dict entry '" + key + "': safetensors has no dtype for " +
           c10::toString(tensor.scalar_type()));
    }
    if (key == "__metadata__") fail("'__metadata__' is reserved in safetensors headers");
    const std::uint64_t nbytes = tensor.numel() * tensor.element_size();
    header[key] = Json{{"dtype", std::string(names.safetensors_name)},
                       {"shape", tensor.sizes().vec()},
                       {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    fail(std::string("cannot write the safetensors header: ") + e.what());
  }
  // Pad with spaces so the data starts 8-byte aligned, as the safetensors library does.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  out.write(length, 8);
  out.write(text.data(), text.size());
  for (const auto& entry : state_dict) {
    const at::Tensor data = writable_tensor(entry.second);
    if (data.nbytes() != 0) out.write(data.data_ptr(), data.nbytes());
  }
}

}  // namespace detail
}  // namespace modhooks
