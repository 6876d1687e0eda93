// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "byte_io.h"
#include "dtypes.h"
#include "entries.h"
#include "file_io.h"
#include "formats.h"
#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// The safetensors library refuses larger headers; so does modhooks, before allocating one.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

/// Fields safetensors does not define are skipped; their nesting is bounded so that skipping
/// recurses no deeper.
constexpr int kMaxJsonDepth = 64;

/// `s` (UTF-8, which checked_dtype ensures) as a JSON string.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out.append("\\u00").append(1, kHex[byte >> 4]).append(1, kHex[byte & 15]);
    } else {
      out += c;
    }
  }
  out += '"';
}

struct Entry {
  std::string name;
  c10::ScalarType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

/// A single pass over the header, which is JSON of one shape: an object of tensor entries
/// ({"dtype": str, "shape": [int], "data_offsets": [int, int]}) and "__metadata__" (an object of
/// strings). Time is linear in the header's size and memory bounded by it (a general JSON
/// library spent quadratic time on many entries and hundreds of bytes per nested array).
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  std::vector<Entry> parse() {
    if (!is_utf8(text_, /*surrogates=*/false))
      fail<FormatError>("checkpoint.safetensors.bad_header",
                        "safetensors header is not valid UTF-8");
    std::vector<Entry> entries;
    std::unordered_set<std::string> names;
    expect('{');
    if (!consume('}')) {
      do {
        std::string name = parse_string();
        expect(':');
        if (!names.insert(name).second)
          fail<FormatError>("checkpoint.safetensors.duplicate_name",
                            "safetensors header names '" + name + "' twice");
        if (name == "__metadata__") {
          parse_metadata();
        } else {
          entries.push_back(parse_entry(std::move(name)));
        }
      } while (consume(','));
      expect('}');
    }
    // safetensors allows spaces after the object (its writer pads with them), nothing else.
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
    if (pos_ != text_.size()) invalid("only spaces may follow the header's object");
    return entries;
  }

 private:
  [[noreturn]] void invalid(const std::string& what) const {
    fail<FormatError>(
        "checkpoint.safetensors.bad_header",
        "safetensors header is not valid JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  /// The next character after blanks, or 0 at the end.
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c || pos_ == text_.size()) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) invalid(std::string("expected '") + c + "'");
  }

  std::uint32_t hex4() {
    if (text_.size() - pos_ < 4) invalid("truncated \\u escape");
    std::uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) invalid("bad \\u escape");
      code = code << 4 | static_cast<std::uint32_t>(digit);
    }
    return code;
  }
  void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | code >> 6);
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | code >> 12);
      out += static_cast<char>(0x80 | (code >> 6 & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | code >> 18);
      out += static_cast<char>(0x80 | (code >> 12 & 0x3F));
      out += static_cast<char>(0x80 | (code >> 6 & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  std::string parse_string() {
    if (peek() != '"') invalid("expected a string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ == text_.size()) invalid("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) invalid("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ == text_.size()) invalid("unterminated string");
      switch (const char e = text_[pos_++]) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t code = hex4();
          if (code >= 0xDC00 && code <= 0xDFFF) invalid("lone surrogate escape");
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") invalid("lone surrogate escape");
            pos_ += 2;
            const std::uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) invalid("lone surrogate escape");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          invalid(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  /// A JSON number's text; `integer` says whether it has neither fraction nor exponent.
  std::string_view scan_number(bool* integer) {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == from) invalid("malformed number");
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    *integer = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_, digits();
      *integer = false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
      *integer = false;
    }
    return text_.substr(start, pos_ - start);
  }
  std::uint64_t parse_uint(const std::string& name, const char* field) {
    const char c = peek();
    if (c != '-' && (c < '0' || c > '9')) {
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': " + field +
                            " holds something that is not a non-negative integer");
    }
    bool integer = false;
    const std::string_view number = scan_number(&integer);
    std::uint64_t value = 0;
    bool fits = integer && number[0] != '-';
    for (std::size_t i = 0; fits && i < number.size(); ++i) {
      fits = !mul_overflows(value, 10, &value) &&
             !add_overflows(value, static_cast<std::uint64_t>(number[i] - '0'), &value);
    }
    if (!fits) {
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': " + field + " holds " + std::string(number) +
                            ", not a non-negative integer below 2^64");
    }
    return value;
  }
  std::vector<std::uint64_t> parse_uints(const std::string& name, const char* field) {
    std::vector<std::uint64_t> values;
    expect('[');
    if (consume(']')) return values;
    do {
      values.push_back(parse_uint(name, field));
    } while (consume(','));
    expect(']');
    return values;
  }

  void skip_value(int depth) {
    if (depth > kMaxJsonDepth)
      invalid("values nest deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    const char c = peek();
    if (c == '"') {
      parse_string();
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (consume(close)) return;
      do {
        if (c == '{') {
          parse_string();
          expect(':');
        }
        skip_value(depth + 1);
      } while (consume(','));
      expect(close);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      bool integer = false;
      scan_number(&integer);
    } else {
      for (std::string_view word : {"true", "false", "null"}) {
        if (text_.substr(pos_, word.size()) == word) {
          pos_ += word.size();
          return;
        }
      }
      invalid("expected a value");
    }
  }

  void parse_metadata() {
    if (peek() != '{')
      fail<FormatError>("checkpoint.safetensors.bad_metadata",
                        "safetensors __metadata__ is not an object");
    ++pos_;
    if (consume('}')) return;
    do {
      const std::string key = parse_string();
      expect(':');
      if (peek() != '"')
        fail<FormatError>("checkpoint.safetensors.bad_metadata",
                          "safetensors __metadata__['" + key + "'] is not a string");
      parse_string();
    } while (consume(','));
    expect('}');
  }

  Entry parse_entry(std::string name) {
    if (peek() != '{')
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': header entry is not an object");
    ++pos_;
    std::optional<std::string> dtype;
    std::optional<std::vector<std::uint64_t>> shape;
    std::optional<std::vector<std::uint64_t>> offsets;
    if (!consume('}')) {
      do {
        const std::string field = parse_string();
        expect(':');
        if (field == "dtype") {
          if (dtype || peek() != '"')
            fail<FormatError>("checkpoint.safetensors.bad_entry",
                              "tensor '" + name + "': no dtype string");
          dtype = parse_string();
        } else if (field == "shape") {
          if (shape || peek() != '[')
            fail<FormatError>("checkpoint.safetensors.bad_entry",
                              "tensor '" + name + "': no shape array");
          shape = parse_uints(name, "shape");
        } else if (field == "data_offsets") {
          if (offsets || peek() != '[') {
            fail<FormatError>("checkpoint.safetensors.bad_entry",
                              "tensor '" + name + "': data_offsets is not a [begin, end] pair");
          }
          offsets = parse_uints(name, "data_offsets");
        } else {
          skip_value(1);
        }
      } while (consume(','));
      expect('}');
    }
    if (!dtype)
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': no dtype string");
    if (!shape)
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': no shape array");
    if (!offsets || offsets->size() != 2) {
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + name + "': data_offsets is not a [begin, end] pair");
    }
    const DtypeNames* names = find_dtype_by_safetensors_name(*dtype);
    if (names == nullptr) {
      fail<FormatError>(
          "checkpoint.safetensors.unsupported_dtype",
          "tensor '" + name + "': dtype '" + *dtype + "' is not one this libtorch has");
    }
    Entry entry{std::move(name), names->type, {}, (*offsets)[0], (*offsets)[1]};
    if (entry.end < entry.begin) {
      fail<FormatError>("checkpoint.safetensors.bad_entry",
                        "tensor '" + entry.name + "': data_offsets end before they begin");
    }
    std::uint64_t nbytes = c10::elementSize(entry.dtype);
    for (const std::uint64_t size : *shape) {
      if (size > INT64_MAX || mul_overflows(nbytes, size, &nbytes)) {
        fail<FormatError>("checkpoint.safetensors.shape_overflow",
                          "tensor '" + entry.name + "': shape overflows");
      }
      entry.shape.push_back(static_cast<std::int64_t>(size));
    }
    if (nbytes != entry.end - entry.begin) {
      fail<FormatError>("checkpoint.safetensors.size_mismatch",
                        "tensor '" + entry.name + "': shape " +
                            c10::str(c10::IntArrayRef(entry.shape)) + " of " + *dtype + " needs " +
                            std::to_string(nbytes) + " bytes, data_offsets span " +
                            std::to_string(entry.end - entry.begin));
    }
    return entry;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

StateDict read_safetensors(const caffe2::serialize::ReadAdapterInterface& in,
                           const std::shared_ptr<const MappedFile>& mapped) {
  const std::uint64_t file_size = in.size();
  if (file_size < 8) {
    fail<FormatError>("checkpoint.safetensors.too_short",
                      "not a safetensors file: " + std::to_string(file_size) +
                          " bytes is too short for the header length");
  }
  unsigned char length_bytes[8];
  read_exactly(in, 0, length_bytes, 8, "safetensors header length");
  const std::uint64_t header_size = load_le(length_bytes, 8);
  if (header_size > file_size - 8 || header_size > kMaxHeaderSize) {
    fail<FormatError>("checkpoint.safetensors.bad_header_length",
                      "safetensors header length " + std::to_string(header_size) + " exceeds the " +
                          std::to_string(file_size - 8) + " bytes after it (or the 100 MB limit)");
  }
  std::string text(static_cast<std::size_t>(header_size), '\0');
  read_exactly(in, 8, text.data(), text.size(), "safetensors header");
  if (text.empty() || text[0] != '{')
    fail<FormatError>("checkpoint.safetensors.bad_header",
                      "safetensors header does not start with '{'");
  std::vector<Entry> entries = HeaderParser(text).parse();
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
      fail<FormatError>("checkpoint.safetensors.bad_layout",
                        "tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) +
                            ", expected " + std::to_string(expected) +
                            " (tensors must not overlap or leave gaps)");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    fail<FormatError>("checkpoint.safetensors.bad_layout",
                      "safetensors tensors cover " + std::to_string(expected) + " bytes, but " +
                          std::to_string(data_size) + " bytes of data follow the header");
  }
  StateDict sd;
  sd.reserve(entries.size());
  for (const Entry& e : entries) {
    const std::uint64_t offset = data_start + e.begin;
    if (mapped && offset % c10::elementSize(e.dtype) == 0) {
      at::Tensor t = at::empty({0}, at::TensorOptions().dtype(e.dtype));
      t.set_(mapped_storage(MappedRecord{mapped, offset, e.end - e.begin, "tensor '" + e.name + "'",
                                         std::nullopt}),
             0, e.shape);
      sd.insert_or_assign(e.name, std::move(t));
      continue;
    }
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    read_exactly(in, offset, t.data_ptr(), e.end - e.begin, "safetensors data");
    sd.insert_or_assign(e.name, std::move(t));
  }
  return sd;
}

void write_safetensors(const StateDict& state_dict, Sink& out) {
  // Written by hand in one pass: a JSON library's ordered object searches its keys on every
  // insertion, which is quadratic in the number of entries.
  std::string text = "{";
  std::uint64_t offset = 0;
  for (const auto& [key, tensor] : state_dict) {
    const DtypeNames& names = checked_dtype(key, tensor);
    if (names.safetensors_name.empty()) {
      fail<ValueError>("checkpoint.save.no_safetensors_dtype",
                       "state dict entry '" + key + "': safetensors has no dtype for " +
                           c10::toString(tensor.scalar_type()));
    }
    if (key == "__metadata__")
      fail<ValueError>("checkpoint.save.reserved_key",
                       "'__metadata__' is reserved in safetensors headers");
    const std::uint64_t nbytes = tensor.numel() * tensor.element_size();
    if (text.size() > 1) text += ',';
    append_json_string(text, key);
    text.append(":{\"dtype\":\"").append(names.safetensors_name).append("\",\"shape\":[");
    for (std::size_t d = 0; d < tensor.sizes().size(); ++d) {
      if (d != 0) text += ',';
      text += std::to_string(tensor.sizes()[d]);
    }
    text.append("],\"data_offsets\":[").append(std::to_string(offset)).append(",");
    offset += nbytes;
    text.append(std::to_string(offset)).append("]}");
  }
  text += '}';
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
MODHOOKS_END_NAMESPACE
