// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "python_json.h"

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

MODHOOKS_BEGIN_NAMESPACE
namespace probe {
namespace detail {
namespace {

void write_string(const std::string& text, std::string& out) {
  // nlohmann escapes what Python escapes; ensure_ascii is the error handler's `\uXXXX` form.
  out += Json(text).dump(-1, ' ', /*ensure_ascii=*/true);
}

void write_number(const Json& value, std::string& out) {
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isnan(v)) {
      out += "NaN";
      return;
    }
    if (std::isinf(v)) {
      out += v > 0 ? "Infinity" : "-Infinity";
      return;
    }
  }
  // Shortest round-trip form, as Python's repr of a float.
  out += value.dump();
}

void write(const Json& value, std::size_t depth, std::string& out) {
  // Appended piece by piece: GCC 12 reports impossible sizes for `"\n" + std::string(...)`.
  auto newline = [&out](std::size_t spaces) {
    out.push_back('\n');
    out.append(spaces, ' ');
  };
  if (value.is_object()) {
    if (value.empty()) {
      out += "{}";
      return;
    }
    out.push_back('{');
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out.push_back(',');
      first = false;
      newline(depth + 1);
      write_string(it.key(), out);
      out += ": ";
      write(it.value(), depth + 1, out);
    }
    newline(depth);
    out.push_back('}');
  } else if (value.is_array()) {
    if (value.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    bool first = true;
    for (const Json& item : value) {
      if (!first) out.push_back(',');
      first = false;
      newline(depth + 1);
      write(item, depth + 1, out);
    }
    newline(depth);
    out.push_back(']');
  } else if (value.is_string()) {
    write_string(value.get<std::string>(), out);
  } else if (value.is_number()) {
    write_number(value, out);
  } else {
    out += value.dump();  // null, true, false
  }
}

}  // namespace

std::string python_json(const Json& value) {
  std::string out;
  write(value, 0, out);
  return out;
}

}  // namespace detail
}  // namespace probe
MODHOOKS_END_NAMESPACE
