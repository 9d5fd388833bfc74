#include "common/npy.h"

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlignment = 64;  // numpy pads magic + length + header to a multiple of 64
constexpr size_t kMaxNpyHeaderBytes = 1 << 20;  // a sane header is < 1 KiB; numpy's limit is 10 KiB
constexpr int kMaxNesting = 8;

// Reads the subset of Python literal syntax that numpy writes in .npy headers (dicts, tuples,
// lists, quoted strings, integers with an optional Python 2 'L', True/False/None) into JSON:
// tuples and lists become arrays, dicts become objects.
class PyLiteralParser {
 public:
  explicit PyLiteralParser(std::string_view text) : text_(text) {}

  Status ParseAll(json* out) {
    Status s = ParseValue(out, 0);
    if (!s.ok()) return s;
    SkipSpace();
    if (pos_ != text_.size()) return Error("end of header");
    return Status::Ok();
  }

 private:
  Status ParseValue(json* out, int depth) {
    if (depth > kMaxNesting) return Error("a shallower value");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("a value");
    char c = text_[pos_];
    if (c == '{') return ParseDict(out, depth);
    if (c == '(') return ParseSequence(')', out, depth);
    if (c == '[') return ParseSequence(']', out, depth);
    if (c == '\'' || c == '"') return ParseString(out);
    if (c == '-' || (c >= '0' && c <= '9')) return ParseInteger(out);
    return ParseWord(out);
  }

  Status ParseString(json* out) {
    char quote = text_[pos_++];
    std::string value;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      value += text_[pos_++];
    }
    if (pos_ >= text_.size()) return Error(std::string("closing quote ") + quote);
    ++pos_;
    *out = std::move(value);
    return Status::Ok();
  }

  Status ParseInteger(json* out) {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), value);
    if (ec != std::errc()) return Error("an integer that fits 64 bits");
    pos_ = end - text_.data();
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;  // Python 2
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e')) {
      return Error("an integer (floats are not valid here)");
    }
    *out = value;
    return Status::Ok();
  }

  Status ParseWord(json* out) {
    for (auto [word, value] :
         {std::pair<std::string_view, json>{"True", true}, {"False", false}, {"None", nullptr}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        *out = value;
        return Status::Ok();
      }
    }
    return Error("a string, integer, tuple, True, False or None");
  }

  // Comma-separated values up to `close`; a trailing comma is allowed, as in "(3,)".
  Status ParseSequence(char close, json* out, int depth) {
    ++pos_;
    *out = json::array();
    for (;;) {
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == close) break;
      json item;
      Status s = ParseValue(&item, depth + 1);
      if (!s.ok()) return s;
      out->push_back(std::move(item));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= text_.size() || text_[pos_] != close) {
        return Error(std::string("',' or '") + close + "'");
      }
    }
    ++pos_;
    return Status::Ok();
  }

  Status ParseDict(json* out, int depth) {
    ++pos_;
    *out = json::object();
    for (;;) {
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '}') break;
      if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
        return Error("a quoted key or '}'");
      }
      json key;
      Status s = ParseString(&key);
      if (!s.ok()) return s;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("':'");
      ++pos_;
      if (s = ParseValue(&(*out)[key.get<std::string>()], depth + 1); !s.ok()) return s;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= text_.size() || text_[pos_] != '}') {
        return Error("',' or '}'");
      }
    }
    ++pos_;
    return Status::Ok();
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  Status Error(const std::string& expected) const {
    return InvalidArgument("malformed .npy header: expected " + expected + " at offset " +
                           std::to_string(pos_) + " of \"" + std::string(text_) + "\"");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

std::string SupportedDescrs() {
  std::string out;
  for (int code = 1; code < 256; ++code) {
    auto dtype = DTypeFromCode(static_cast<uint8_t>(code));
    if (!dtype || DTypeNumpyDescr(*dtype).empty()) continue;
    if (!out.empty()) out += ", ";
    out +=
        "'" + std::string(DTypeNumpyDescr(*dtype)) + "' (" + std::string(DTypeName(*dtype)) + ")";
  }
  return out;
}

Status DescrToDType(const json& descr, DType* out) {
  if (!descr.is_string()) {
    return InvalidArgument("unsupported .npy descr " + descr.dump() +
                           ": structured (record) dtypes are not supported; expected one of " +
                           SupportedDescrs());
  }
  const std::string text = descr.get<std::string>();
  if (auto dtype = DTypeFromNumpyDescr(text)) {
    *out = *dtype;
    return Status::Ok();
  }
  if (text.size() >= 2 && text[0] == '>') {
    std::string little = "<" + text.substr(1);
    if (auto dtype = DTypeFromNumpyDescr(little)) {
      if (DTypeSize(*dtype) == 1) {  // one-byte elements have no byte order
        *out = *dtype;
        return Status::Ok();
      }
      return InvalidArgument("big-endian arrays are not supported (descr '" + text +
                             "'); convert with arr.astype('" + little + "')");
    }
  }
  return InvalidArgument("unsupported .npy dtype descr '" + text + "'; expected one of " +
                         SupportedDescrs());
}

Status ShapeFromJson(const json& shape, std::vector<int64_t>* out) {
  if (!shape.is_array()) {
    return InvalidArgument(".npy header 'shape': expected a tuple of integers, got " +
                           shape.dump());
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(".npy header 'shape': rank " + std::to_string(shape.size()) +
                           " exceeds the maximum of " + std::to_string(kMaxRank));
  }
  out->clear();
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return InvalidArgument(".npy header 'shape': expected non-negative integers, got " +
                             shape.dump());
    }
    out->push_back(d.get<int64_t>());
  }
  return Status::Ok();
}

// Interprets the parsed header dict: exactly the keys descr, fortran_order and shape.
Status SpecFromHeaderDict(const json& dict, TensorSpec* spec) {
  if (!dict.is_object()) {
    return InvalidArgument(".npy header: expected a dict, got " + dict.dump());
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (!dict.contains(key)) {
      return InvalidArgument(std::string(".npy header: missing key '") + key +
                             "' (expected descr, fortran_order, shape)");
    }
  }
  for (const auto& [key, value] : dict.items()) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      return InvalidArgument(".npy header: unknown key '" + key +
                             "' (expected descr, fortran_order, shape)");
    }
  }
  TensorSpec result;
  Status s = DescrToDType(dict["descr"], &result.dtype);
  if (!s.ok()) return s;
  if (s = ShapeFromJson(dict["shape"], &result.shape); !s.ok()) return s;
  const json& fortran = dict["fortran_order"];
  if (!fortran.is_boolean()) {
    return InvalidArgument(".npy header 'fortran_order': expected True or False, got " +
                           fortran.dump());
  }
  if (fortran.get<bool>() && result.shape.size() >= 2) {
    return InvalidArgument(
        "Fortran-ordered arrays not supported; use np.ascontiguousarray(arr) before np.save");
  }
  *spec = std::move(result);
  return Status::Ok();
}

uint32_t ReadLittleEndian(std::string_view bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

std::string Printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes.substr(0, 8)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

Status CheckDataSize(const TensorSpec& spec, size_t available) {
  auto expected = ByteSize(spec);
  if (!expected) return InvalidArgument("shape " + ShapeToString(spec.shape) + " is too large");
  if (*expected == available) return Status::Ok();
  return InvalidArgument(
      std::string(available < *expected ? "truncated .npy file" : "trailing bytes in .npy file") +
      ": " + SpecToString(spec) + " expected " + std::to_string(*expected) + " data bytes, got " +
      std::to_string(available));
}

std::string ShapeAsPythonTuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

void AppendLittleEndian(uint32_t value, size_t width, std::string* out) {
  for (size_t i = 0; i < width; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

Status WithPath(const std::string& path, const Status& status) {
  return Status(status.code(), path + ": " + status.message());
}

}  // namespace

Status ParseNpyHeader(std::string_view bytes, TensorSpec* spec, size_t* data_offset) {
  if (bytes.size() < kMagic.size() + 2 || bytes.substr(0, kMagic.size()) != kMagic) {
    return InvalidArgument("not a .npy file: expected magic \\x93NUMPY, got \"" + Printable(bytes) +
                           "\" (" + std::to_string(bytes.size()) + " bytes)");
  }
  int major = static_cast<unsigned char>(bytes[6]);
  int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return InvalidArgument("unsupported .npy format version " + std::to_string(major) + "." +
                           std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  // 1.0 stores the header length in 2 bytes; 2.0 and 3.0 (UTF-8 header) in 4.
  size_t width = major == 1 ? 2 : 4;
  size_t preamble = kMagic.size() + 2 + width;
  if (bytes.size() < preamble) {
    return InvalidArgument("truncated .npy file: expected " + std::to_string(preamble) +
                           " bytes of preamble, got " + std::to_string(bytes.size()));
  }
  size_t header_len = ReadLittleEndian(bytes, kMagic.size() + 2, width);
  if (header_len > kMaxNpyHeaderBytes) {
    return InvalidArgument(".npy header of " + std::to_string(header_len) +
                           " bytes exceeds the limit of " + std::to_string(kMaxNpyHeaderBytes));
  }
  if (bytes.size() < preamble + header_len) {
    return InvalidArgument("truncated .npy file: expected a header of " +
                           std::to_string(header_len) + " bytes, got " +
                           std::to_string(bytes.size() - preamble));
  }
  json dict;
  Status s = PyLiteralParser(bytes.substr(preamble, header_len)).ParseAll(&dict);
  if (!s.ok()) return s;
  if (s = SpecFromHeaderDict(dict, spec); !s.ok()) return s;
  *data_offset = preamble + header_len;
  return Status::Ok();
}

Status ParseNpy(std::string_view bytes, TensorSpec* spec, std::string* data) {
  TensorSpec parsed;
  size_t offset = 0;
  Status s = ParseNpyHeader(bytes, &parsed, &offset);
  if (!s.ok()) return s;
  if (s = CheckDataSize(parsed, bytes.size() - offset); !s.ok()) return s;
  data->assign(bytes.data() + offset, bytes.size() - offset);
  *spec = std::move(parsed);
  return Status::Ok();
}

Status MakeNpyHeader(const TensorSpec& spec, std::string* header) {
  std::string_view descr = DTypeNumpyDescr(spec.dtype);
  if (descr.empty()) {
    return InvalidArgument(
        std::string(DTypeName(spec.dtype)) + " cannot be written to a .npy file: numpy has no " +
        std::string(DTypeName(spec.dtype)) + " dtype; convert the tensor to float32 first");
  }
  if (!NumElements(spec.shape)) {
    return InvalidArgument("cannot write shape " + ShapeToString(spec.shape) +
                           " to a .npy file: dimensions must be non-negative and not overflow");
  }
  std::string dict = "{'descr': '" + std::string(descr) +
                     "', 'fortran_order': False, 'shape': " + ShapeAsPythonTuple(spec.shape) +
                     ", }";
  // Version 1.0 unless the padded header overflows its 16-bit length field.
  int major = 1;
  size_t preamble = kMagic.size() + 2 + 2;
  size_t padded =
      dict.size() + 1 + (kAlignment - (preamble + dict.size() + 1) % kAlignment) % kAlignment;
  if (padded > 0xffff) {
    major = 2;
    preamble = kMagic.size() + 2 + 4;
    padded =
        dict.size() + 1 + (kAlignment - (preamble + dict.size() + 1) % kAlignment) % kAlignment;
  }
  std::string out(kMagic);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  AppendLittleEndian(static_cast<uint32_t>(padded), major == 1 ? 2 : 4, &out);
  out += dict;
  out.append(padded - dict.size() - 1, ' ');
  out.push_back('\n');
  *header = std::move(out);
  return Status::Ok();
}

Status SerializeNpy(const TensorSpec& spec, const void* data, size_t nbytes, std::string* out) {
  std::string header;
  Status s = MakeNpyHeader(spec, &header);
  if (!s.ok()) return s;
  if (s = CheckDataSize(spec, nbytes); !s.ok()) return s;
  header.append(static_cast<const char*>(data), nbytes);
  *out = std::move(header);
  return Status::Ok();
}

Status ReadNpy(const std::string& path, TensorSpec* spec, std::string* data) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Internal(path + ": read failed: " + std::strerror(errno));
  TensorSpec parsed;
  size_t offset = 0;
  Status s = ParseNpyHeader(contents, &parsed, &offset);
  if (!s.ok()) return WithPath(path, s);
  if (s = CheckDataSize(parsed, contents.size() - offset); !s.ok()) return WithPath(path, s);
  contents.erase(0, offset);  // in place: no second copy of a large array
  *data = std::move(contents);
  *spec = std::move(parsed);
  return Status::Ok();
}

Status WriteNpy(const std::string& path, const TensorSpec& spec, const void* data, size_t nbytes) {
  std::string header;
  Status s = MakeNpyHeader(spec, &header);
  if (!s.ok()) return WithPath(path, s);
  if (s = CheckDataSize(spec, nbytes); !s.ok()) return WithPath(path, s);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing: " + std::strerror(errno));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  out.close();
  if (!out) return Internal(path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace torchfarm
