#include "common/protocol.h"

#include "common/int_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>

#include "common/bytes_items.h"
#include "common/client_weights.h"
#include "common/model_versions.h"
#include "common/number_parse.h"
#include "common/tensor_names.h"

namespace torchfarm {

using nlohmann::json;

namespace {

std::string TypeName(const json& j) { return j.type_name(); }

}  // namespace

bool JsonNestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

Status TensorSpecFromJson(const json& j, const std::string& where, bool allow_wildcard,
                          TensorSpec* out) {
  if (!j.is_object()) {
    return InvalidArgument(where + ": expected an object {\"dtype\": ..., \"shape\": [...]}, got " +
                           TypeName(j));
  }
  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) {
    return InvalidArgument(where + ".dtype: expected a string, one of " + AllDTypeNames());
  }
  auto dtype = ParseDType(dt->get<std::string>());
  if (!dtype) {
    return InvalidArgument(where + ".dtype: expected one of " + AllDTypeNames() + ", got '" +
                           dt->get<std::string>() + "'");
  }
  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) {
    return InvalidArgument(where + ".shape: expected an array of integers");
  }
  if (sh->size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(where + ".shape: rank " + std::to_string(sh->size()) +
                           " exceeds the maximum of " + std::to_string(kMaxRank));
  }
  TensorSpec spec;
  spec.dtype = *dtype;
  for (size_t k = 0; k < sh->size(); ++k) {
    // -1 marks a variable dimension where one is allowed; 2^64-1 is never read as it.
    int64_t v = 0;
    Status s = IntegerFromJson((*sh)[k], where + ".shape[" + std::to_string(k) + "]",
                               allow_wildcard ? -1 : 0, INT64_MAX, &v);
    if (!s.ok()) {
      return allow_wildcard ? InvalidArgument(s.message() + " (-1 for a variable dimension)") : s;
    }
    spec.shape.push_back(v);
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "dtype" && key != "shape" && key != "name") {
      return InvalidArgument(where + ": unknown key '" + key + "' (expected dtype, shape, name)");
    }
  }
  *out = std::move(spec);
  return Status::Ok();
}

json TensorSpecToJson(const TensorSpec& spec) {
  return json{{"dtype", DTypeName(spec.dtype)}, {"shape", spec.shape}};
}

namespace {

// The scanner's character classes: one table lookup a character instead of comparisons or a
// call through a pointer (issue 36: the header scan is ~10% of the ZeroMQ path's instructions).
enum CharClass : uint8_t {
  kBlankChar = 1,       // JSON whitespace
  kKeyChar = 2,         // a header key's characters: a-z and '_'
  kNameChar = 4,        // a model's or a version's: letters, digits, '_', '-', '.'
  kTensorNameChar = 8,  // a tensor's (common/tensor_names.h): kNameChar's and ':'
  kPlainChar = 16,      // printable ASCII but '"' and '\\': a string's characters without escapes
  kDigitChar = 32,
};

constexpr std::array<uint8_t, 256> MakeCharClasses() {
  std::array<uint8_t, 256> classes{};
  for (int c = 0; c < 256; ++c) {
    uint8_t k = 0;
    const bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    const bool digit = c >= '0' && c <= '9';
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') k |= kBlankChar;
    if (lower || c == '_') k |= kKeyChar;
    if (lower || upper || digit || c == '_' || c == '-' || c == '.')
      k |= kNameChar | kTensorNameChar;
    if (c == ':') k |= kTensorNameChar;
    if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') k |= kPlainChar;
    if (digit) k |= kDigitChar;
    classes[static_cast<size_t>(c)] = k;
  }
  return classes;
}
constexpr std::array<uint8_t, 256> kCharClasses = MakeCharClasses();

inline uint8_t ClassOf(char c) { return kCharClasses[static_cast<unsigned char>(c)]; }

// A cursor over a header for ParseRequestHeaderFast. Every method returns false on anything it
// does not handle; the caller then gives the text to the JSON parser.
class HeaderScanner {
 public:
  explicit HeaderScanner(std::string_view text) : text_(text) {}

  // The loops below run on locals: a char read may alias at_, so a loop on the member would
  // load and store it every character.
  void SkipBlanks() {
    size_t at = at_;
    while (at < text_.size() && (ClassOf(text_[at]) & kBlankChar)) ++at;
    at_ = at;
  }
  bool Take(char c) {
    SkipBlanks();
    if (at_ >= text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  bool Peek(char c) {
    SkipBlanks();
    return at_ < text_.size() && text_[at_] == c;
  }
  bool PeekDigit() {
    SkipBlanks();
    return at_ < text_.size() && (ClassOf(text_[at_]) & kDigitChar);
  }
  bool AtEnd() {
    SkipBlanks();
    return at_ == text_.size();
  }
  // A string of printable ASCII without escapes, each character of class `allowed` (kPlainChar:
  // any such character).
  bool String(std::string_view* out, uint8_t allowed = kPlainChar) {
    if (!Take('"')) return false;
    const size_t start = at_;
    const uint8_t need = allowed | kPlainChar;
    const char* text = text_.data();
    const size_t size = text_.size();
    size_t at = start;
    while (at < size && (ClassOf(text[at]) & need) == need) ++at;
    if (at >= size || text[at] != '"') return false;
    *out = std::string_view(text + start, at - start);
    at_ = at + 1;
    return true;
  }
  // A non-negative integer of at most 18 digits, without leading zeros or a fraction/exponent.
  bool Unsigned(uint64_t* out) {
    SkipBlanks();
    const size_t start = at_;
    const char* text = text_.data();
    const size_t size = text_.size();
    size_t at = start;
    uint64_t value = 0;
    while (at < size && (ClassOf(text[at]) & kDigitChar)) {
      value = value * 10 + static_cast<uint64_t>(text[at] - '0');
      ++at;
    }
    at_ = at;
    const size_t digits = at - start;
    if (digits == 0 || digits > 18 || (digits > 1 && text[start] == '0')) return false;
    if (at < size && (text[at] == '.' || text[at] == 'e' || text[at] == 'E')) return false;
    *out = value;
    return true;
  }
  bool Literal(std::string_view word) {
    SkipBlanks();
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
};

bool ScanId(HeaderScanner& in, json* id) {
  // Clients' ids are mostly integers: tried first.
  if (in.PeekDigit()) {
    uint64_t value;
    if (!in.Unsigned(&value)) return false;
    *id = value;  // number_unsigned, as json::parse makes it
    return true;
  }
  if (in.Peek('"')) {
    std::string_view text;
    if (!in.String(&text)) return false;
    *id = std::string(text);
    return true;
  }
  if (in.Literal("null")) {
    *id = nullptr;
    return true;
  }
  if (in.Literal("true")) {
    *id = true;
    return true;
  }
  if (in.Literal("false")) {
    *id = false;
    return true;
  }
  return false;  // anything else (a negative or fractional id, an object) is the JSON path's
}

// {"dtype": "...", "shape": [...]} with exactly those two keys, and optionally a "name" of
// tensor-name characters (*name stays empty without one).
bool ScanTensorSpec(HeaderScanner& in, int max_rank, TensorSpec* spec, std::string_view* name) {
  if (!in.Take('{')) return false;
  bool have_dtype = false, have_shape = false, have_name = false;
  do {
    std::string_view key;
    if (!in.String(&key, kKeyChar) || !in.Take(':')) return false;
    if (key == "name" && !have_name) {
      if (!in.String(name, kTensorNameChar) || !ValidTensorName(*name)) return false;
      have_name = true;
    } else if (key == "dtype" && !have_dtype) {
      std::string_view name;
      if (!in.String(&name, kNameChar)) return false;
      auto dtype = ParseDType(name);
      if (!dtype) return false;
      spec->dtype = *dtype;
      have_dtype = true;
    } else if (key == "shape" && !have_shape) {
      if (!in.Take('[')) return false;
      // Gathered here first: the shape vector is allocated once, at its size.
      int64_t dims[kMaxRank];
      int rank = 0;
      if (!in.Take(']')) {
        do {
          uint64_t dim;
          if (!in.Unsigned(&dim) || rank >= max_rank) return false;
          dims[rank++] = static_cast<int64_t>(dim);
        } while (in.Take(','));
        if (!in.Take(']')) return false;
      }
      spec->shape.assign(dims, dims + rank);
      have_shape = true;
    } else {
      return false;
    }
  } while (in.Take(','));
  return in.Take('}') && have_dtype && have_shape;
}

// An integer field that may also be null (then `*out` keeps its default).
bool ScanOptionalInteger(HeaderScanner& in, uint64_t max, int64_t* out) {
  if (in.Literal("null")) return true;
  uint64_t value;
  if (!in.Unsigned(&value) || value > max) return false;
  *out = static_cast<int64_t>(value);
  return true;
}

}  // namespace

namespace {

// The rest of a header whose "op" is shm_create or shm_release (docs/protocol.md).
Status ParseShmCommand(const json& j, RequestHeader* out) {
  const bool create = out->op == RequestOp::kShmCreate;
  const char* op = create ? "shm_create" : "shm_release";
  const char* field = create ? "bytes" : "region";
  auto value = j.find(field);
  if (create) {
    const std::string key = std::string(op) + ": header field 'bytes'";
    if (value == j.end()) return IntegerOutOfRange(key, 1, INT64_MAX, "nothing");
    if (Status s = IntegerFromJson(*value, key, 1, INT64_MAX, &out->shm_bytes); !s.ok()) return s;
  } else {
    if (value == j.end() || !value->is_string() || value->get<std::string>().empty()) {
      return InvalidArgument(std::string(op) + ": header field 'region': expected the token "
                             "shm_create returned, got " +
                             (value == j.end() ? "nothing" : value->dump()));
    }
    out->shm_region = value->get<std::string>();
  }
  for (const auto& [key, unused] : j.items()) {
    if (key != "v" && key != "id" && key != "op" && key != field) {
      return InvalidArgument(std::string(op) + ": unknown field '" + key + "' (expected v, id, " +
                             "op, " + field + ")");
    }
  }
  return Status::Ok();
}

// The "name" of inputs[i], appended to out->input_names; every input named or none.
Status ReadInputName(const json& entry, size_t i, RequestHeader* out) {
  const std::string where = "inputs[" + std::to_string(i) + "]";
  std::string name;
  bool named = false;
  if (Status s = TensorNameFromJson(entry, where, &name, &named); !s.ok()) return s;
  if (i > 0 && named != !out->input_names.empty()) {
    return InvalidArgument(where + ".name: " + (named ? "given, but inputs[0] has none"
                                                      : "missing, but inputs[0] has one") +
                           "; name every input or none");
  }
  if (named) out->input_names.push_back(std::move(name));
  return Status::Ok();
}

// Checks the header's size (limits.max_header_bytes) and nesting (kMaxHeaderDepth) before parsing.
Status CheckHeaderText(std::string_view text, const RequestLimits& limits) {
  if (text.size() > limits.max_header_bytes) {
    return InvalidArgument("header of " + std::to_string(text.size()) +
                           " bytes exceeds the limit of " +
                           std::to_string(limits.max_header_bytes));
  }
  if (!JsonNestingWithin(text, kMaxHeaderDepth)) {
    return InvalidArgument("header nests arrays or objects deeper than " +
                           std::to_string(kMaxHeaderDepth) + " levels");
  }
  return Status::Ok();
}

// The header's "id" (kept even when "v" is wrong) and its protocol version "v".
Status ReadIdAndVersion(const json& j, RequestHeader* out) {
  if (auto id = j.find("id"); id != j.end()) out->id = *id;
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() != kProtocolVersion) {
    return InvalidArgument("header field 'v': expected protocol version " +
                           std::to_string(kProtocolVersion) + ", got " +
                           (v == j.end() ? std::string("nothing") : v->dump()));
  }
  return Status::Ok();
}

// The header's "model" (a non-empty string) and optional "version".
Status ReadModelAndVersion(const json& j, RequestHeader* out) {
  auto model = j.find("model");
  if (model == j.end() || !model->is_string() || model->get<std::string>().empty()) {
    return InvalidArgument("header field 'model': expected a non-empty string");
  }
  out->model = model->get<std::string>();
  if (auto version = j.find("version"); version != j.end() && !version->is_null()) {
    if (!version->is_string() || !ValidVersion(version->get<std::string>())) {
      return InvalidArgument("header field 'version': expected a string of 1.." +
                             std::to_string(kMaxVersionLength) +
                             " letters, digits, '_', '-' or '.', got " + version->dump());
    }
    out->version = version->get<std::string>();
  }
  return Status::Ok();
}

// inputs[i] of `count`: its optional "shm" reference, its spec and name, and its rank.
Status ReadInput(const json& input, size_t i, size_t count, const RequestLimits& limits,
                 RequestHeader* out) {
  const std::string where = "inputs[" + std::to_string(i) + "]";
  const json* entry = &input;
  json without_shm;
  if (entry->is_object() && entry->contains("shm")) {
    ShmRef ref;
    if (Status s = ShmRefFromJson((*entry)["shm"], where + ".shm", false, &ref); !s.ok()) return s;
    out->input_shm.resize(count);
    out->input_shm[i] = std::move(ref);
    without_shm = *entry;
    without_shm.erase("shm");
    entry = &without_shm;
  }
  TensorSpec spec;
  Status s = TensorSpecFromJson(*entry, where, false, &spec);
  if (!s.ok()) return s;
  if (s = ReadInputName(*entry, i, out); !s.ok()) return s;
  if (spec.shape.size() > static_cast<size_t>(limits.max_rank)) {
    return InvalidArgument("inputs[" + std::to_string(i) + "].shape: rank " +
                           std::to_string(spec.shape.size()) + " exceeds the maximum of " +
                           std::to_string(limits.max_rank) + " (limits.max_rank)");
  }
  out->inputs.push_back(std::move(spec));
  return Status::Ok();
}

// The header's "inputs": a non-empty array of at most limits.max_inputs entries (ReadInput).
Status ReadInputs(const json& j, const RequestLimits& limits, RequestHeader* out) {
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array() || inputs->empty()) {
    return InvalidArgument(
        "header field 'inputs': expected a non-empty array of "
        "{\"dtype\", \"shape\"}");
  }
  if (inputs->size() > limits.max_inputs) {
    return InvalidArgument("header field 'inputs': " + std::to_string(inputs->size()) +
                           " inputs exceed the maximum of " + std::to_string(limits.max_inputs));
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    if (Status s = ReadInput((*inputs)[i], i, inputs->size(), limits, out); !s.ok()) return s;
  }
  return Status::Ok();
}

// The header's optional "timeout_ms", "deadline_unix_us", "priority" and "output_shm".
Status ReadOptionalFields(const json& j, RequestHeader* out) {
  if (auto t = j.find("timeout_ms"); t != j.end() && !t->is_null()) {
    // Beyond kMaxTimeoutMs (supervisor/intake/job_intake.h) it means no deadline; never negative.
    if (Status s = IntegerFromJson(*t, "header field 'timeout_ms'", 0, INT64_MAX, &out->timeout_ms);
        !s.ok())
      return s;
  }
  if (auto d = j.find("deadline_unix_us"); d != j.end() && !d->is_null()) {
    if (Status s = IntegerFromJson(*d, "header field 'deadline_unix_us'", 0, INT64_MAX,
                                   &out->deadline_unix_us);
        !s.ok())
      return s;
  }
  if (auto p = j.find("priority"); p != j.end() && !p->is_null()) {
    if (Status s = IntegerFromJson(*p, "header field 'priority'", 0, kMaxPriority, &out->priority);
        !s.ok())
      return s;
  }
  if (auto w = j.find("client_weight"); w != j.end() && !w->is_null()) {
    if (Status s = ClientWeightFromJson(*w, "header field 'client_weight'", &out->client_weight);
        !s.ok())
      return s;
  }
  if (auto o = j.find("output_shm"); o != j.end()) {
    if (Status s = ShmRefFromJson(*o, "header field 'output_shm'", true, &out->output_shm); !s.ok())
      return s;
  }
  if (auto o = j.find("outputs_shm"); o != j.end()) {
    if (Status s = OutputPlacesFromJson(*o, "header field 'outputs_shm'", &out->output_places);
        !s.ok())
      return s;
  }
  return Status::Ok();
}

// Checks that an inference header has no field beyond those read above.
Status CheckHeaderFields(const json& j) {
  for (const auto& [key, value] : j.items()) {
    if (key != "v" && key != "id" && key != "op" && key != "model" && key != "version" &&
        key != "inputs" && key != "timeout_ms" && key != "deadline_unix_us" && key != "priority" &&
        key != "client_weight" && key != "output_shm" && key != "outputs_shm") {
      return InvalidArgument("header: unknown field '" + key +
                             "' (expected v, id, op, model, version, inputs, timeout_ms, "
                             "deadline_unix_us, priority, client_weight, output_shm, outputs_shm)");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// A header as RequestHeader{} makes it (the callers' usual one: resetting it costs ~250
// instructions, a tenth of the scan). Every field is compared: a field added to RequestHeader
// must be added here too, or a caller's reused header could keep it through a fast parse.
bool Pristine(const RequestHeader& h) {
  return h.id.is_null() && h.model.empty() && h.version.empty() && h.inputs.empty() &&
         h.input_names.empty() && h.timeout_ms == 0 && h.deadline_unix_us == 0 && h.priority == 0 &&
         h.client_weight == 0 && h.input_shm.empty() && h.output_shm.region.empty() &&
         h.output_shm.offset == 0 && h.output_shm.bytes == 0 && h.output_places.empty() &&
         h.op == RequestOp::kInfer && h.shm_bytes == 0 && h.shm_region.empty();
}

}  // namespace

bool ParseRequestHeaderFast(std::string_view text, RequestHeader* out, const RequestLimits& limits) {
  if (text.size() > limits.max_header_bytes) return false;
  // Read straight into *out (a move of a whole header costs more than the scan of a small one);
  // on false it holds a partial header, which the JSON path starts over from.
  if (!Pristine(*out)) *out = RequestHeader{};
  RequestHeader& header = *out;
  HeaderScanner in(text);
  if (!in.Take('{')) return false;
  enum Seen : unsigned {
    kV = 1,
    kId = 2,
    kModel = 4,
    kInputs = 8,
    kTimeout = 16,
    kPriority = 32,
    kVersion = 64,
    kDeadline = 128
  };
  unsigned seen = 0;
  const int max_rank = std::min(limits.max_rank, kMaxRank);
  do {
    std::string_view key;
    if (!in.String(&key, kKeyChar) || !in.Take(':')) return false;
    unsigned field;
    if (key == "v") {
      uint64_t v;
      if (!in.Unsigned(&v) || v != static_cast<uint64_t>(kProtocolVersion)) return false;
      field = kV;
    } else if (key == "id") {
      if (!ScanId(in, &header.id)) return false;
      field = kId;
    } else if (key == "model") {
      std::string_view model;
      if (!in.String(&model, kNameChar) || model.empty()) return false;
      header.model.assign(model.data(), model.size());
      field = kModel;
    } else if (key == "version") {
      std::string_view version;
      if (!in.String(&version, kNameChar) || !ValidVersion(std::string(version))) return false;
      header.version = std::string(version);
      field = kVersion;
    } else if (key == "inputs") {
      if (!in.Take('[')) return false;
      // Scanned in place: no spec moved into the list. Room for a few inputs at once, so a
      // request's first one does not go through the vector's growth path.
      header.inputs.reserve(4);
      do {
        std::string_view name;
        if (header.inputs.size() >= limits.max_inputs) return false;
        const bool first = header.inputs.empty();
        if (!ScanTensorSpec(in, max_rank, &header.inputs.emplace_back(), &name)) return false;
        // Every input named or none: a mix is an error, which the JSON path words.
        if (name.empty() != header.input_names.empty() && !first) return false;
        if (!name.empty()) header.input_names.emplace_back(name);
      } while (in.Take(','));
      if (!in.Take(']')) return false;
      field = kInputs;
    } else if (key == "timeout_ms") {
      if (!ScanOptionalInteger(in, UINT64_MAX, &header.timeout_ms)) return false;
      field = kTimeout;
    } else if (key == "deadline_unix_us") {
      if (!ScanOptionalInteger(in, INT64_MAX, &header.deadline_unix_us)) return false;
      field = kDeadline;
    } else if (key == "priority") {
      int64_t priority = 0;
      if (!ScanOptionalInteger(in, 1000, &priority)) return false;
      header.priority = static_cast<int>(priority);
      field = kPriority;
    } else {
      return false;
    }
    if (seen & field) return false;  // a repeated key: the JSON path decides which one counts
    seen |= field;
  } while (in.Take(','));
  if (!in.Take('}') || !in.AtEnd()) return false;
  return (seen & (kV | kModel | kInputs)) == (kV | kModel | kInputs);
}

Status ParseRequestHeader(std::string_view text, RequestHeader* out, const RequestLimits& limits) {
  if (ParseRequestHeaderFast(text, out, limits)) return Status::Ok();
  return ParseRequestHeaderJson(text, out, limits);
}

Status ParseRequestHeaderJson(std::string_view text, RequestHeader* out,
                              const RequestLimits& limits) {
  *out = RequestHeader{};
  if (Status s = CheckHeaderText(text, limits); !s.ok()) return s;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgument("frame 0 must be a UTF-8 JSON header object; it is not valid JSON");
  }
  if (!j.is_object()) {
    return InvalidArgument("frame 0 must be a JSON object, got " + TypeName(j));
  }
  if (Status s = ReadIdAndVersion(j, out); !s.ok()) return s;
  if (Status s = RequestOpFromJson(j, &out->op); !s.ok()) return s;
  if (out->op != RequestOp::kInfer) return ParseShmCommand(j, out);
  if (Status s = ReadModelAndVersion(j, out); !s.ok()) return s;
  if (Status s = ReadInputs(j, limits, out); !s.ok()) return s;
  if (Status s = ReadOptionalFields(j, out); !s.ok()) return s;
  return CheckHeaderFields(j);
}

Status CheckInputFrames(const RequestHeader& header, const std::vector<size_t>& frame_sizes,
                        const RequestLimits& limits) {
  size_t framed = 0;
  for (size_t i = 0; i < header.inputs.size(); ++i) framed += header.input_in_shm(i) ? 0 : 1;
  if (frame_sizes.size() != framed) {
    std::string in_shm = framed == header.inputs.size()
                             ? ""
                             : " (" + std::to_string(header.inputs.size() - framed) +
                                   " of them in shared memory, which take no frame)";
    return InvalidArgument("header declares " + std::to_string(header.inputs.size()) +
                           " input(s)" + in_shm + " but the message has " +
                           std::to_string(frame_sizes.size()) + " data frame(s) after the header");
  }
  size_t frame = 0;
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (IsBytes(header.inputs[i].dtype)) {
      if (header.input_in_shm(i)) {
        return InvalidArgument("inputs[" + std::to_string(i) +
                               "]: a bytes input travels as a data frame, not in shared memory");
      }
      if (frame_sizes[frame] > limits.max_tensor_bytes) {
        return ResourceExhausted(
            "inputs[" + std::to_string(i) + "]: " + std::to_string(frame_sizes[frame]) +
            " bytes, over the limit of " + std::to_string(limits.max_tensor_bytes) +
            " (limits.max_tensor_bytes)");
      }
      ++frame;  // its items are checked by CheckBytesFrames
      continue;
    }
    auto expected = ByteSize(header.inputs[i]);
    if (!expected) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: shape " +
                             ShapeToString(header.inputs[i].shape) + " is too large");
    }
    if (*expected > limits.max_tensor_bytes) {
      return ResourceExhausted("inputs[" + std::to_string(i) + "]: " +
                               SpecToString(header.inputs[i]) + " needs " +
                               std::to_string(*expected) + " bytes, over the limit of " +
                               std::to_string(limits.max_tensor_bytes) + " (limits.max_tensor_bytes)");
    }
    if (header.input_in_shm(i)) continue;
    if (*expected != frame_sizes[frame]) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: " +
                             SpecToString(header.inputs[i]) + " needs " +
                             std::to_string(*expected) + " bytes, frame " +
                             std::to_string(frame + 1) + " has " +
                             std::to_string(frame_sizes[frame]));
    }
    ++frame;
  }
  return Status::Ok();
}

Status CheckBytesFrames(const RequestHeader& header, const std::vector<std::string_view>& frames,
                        const RequestLimits& limits) {
  size_t frame = 0;
  for (size_t i = 0; i < header.inputs.size() && frame < frames.size(); ++i) {
    if (header.input_in_shm(i)) continue;
    const std::string_view data = frames[frame++];
    if (!IsBytes(header.inputs[i].dtype)) continue;
    Status s = CheckBytesTensor(header.inputs[i], data, limits.max_item_bytes,
                                "inputs[" + std::to_string(i) + "]");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

std::string MakeOkReply(const json& id, const std::vector<TensorSpec>& outputs,
                        const StageTimes& timing, int worker_id, const std::string& shm_region,
                        const std::vector<uint64_t>* shm_offsets) {
  return MakeOkReply(id, outputs, {}, timing, worker_id, shm_region, shm_offsets);
}

OkReplyText::OkReplyText(const json& id, const std::vector<TensorSpec>& outputs,
                         const std::vector<std::string>& output_names, const StageTimes& timing,
                         int worker_id, std::string_view shm_region,
                         const std::vector<uint64_t>* shm_offsets)
    : id_(id),
      outputs_(outputs),
      output_names_(output_names),
      timing_(timing),
      worker_id_(worker_id),
      shm_region_(shm_region),
      shm_offsets_(shm_offsets) {
  // Built by hand: this runs once per answered request, and a json object plus dump() cost
  // several times more (bench/analysis.md). The layout equals json::dump() of the same object.
  // Written through a pointer into a buffer sized once to a bound on the text: literals are
  // fixed-size copies, numbers to_chars in place (issue 36; appending each piece cost a call, a
  // capacity check and a copy).
  if (!id.is_number_unsigned() && !id.is_null()) {
    id_text_ = id.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // Every fixed part, an integer id and every timing field at 20 digits come to 284.
  bound_ = 320 + id_text_.size();
  for (size_t i = 0; i < outputs.size(); ++i) {
    size_t name = 10 + kIntChars;  // "OUTPUT__k"
    if (i < output_names.size() && ValidTensorName(output_names[i])) {
      name = 2 + output_names[i].size();
    } else if (i < output_names.size()) {
      dumped_names_.resize(outputs.size());
      dumped_names_[i] = json(output_names[i]).dump(-1, ' ', false, json::error_handler_t::replace);
      name = dumped_names_[i].size();
    }
    bound_ += 96 + name + (kIntChars + 1) * outputs[i].shape.size() +
              (shm_offsets ? shm_region.size() + kIntChars : 0);
  }
}

char* OkReplyText::Write(char* out) const {
  char* p = out;
  auto put = [&p](std::string_view text) {
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  };
  auto put_int = [&p](auto value) { p = std::to_chars(p, p + kIntChars, value).ptr; };
  put("{\"v\":1,\"id\":");
  if (id_.is_number_unsigned()) {
    put_int(id_.get<uint64_t>());
  } else if (id_.is_null()) {
    put("null");
  } else {
    put(id_text_);
  }
  put(",\"status\":\"ok\",\"outputs\":[");
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (i) *p++ = ',';
    put("{\"dtype\":\"");
    put(DTypeName(outputs_[i].dtype));
    // Keys in dump()'s (sorted) order. A config name needs no escaping (tensor_names.h); any
    // other was dumped above.
    put("\",\"name\":");
    if (i >= output_names_.size()) {
      put("\"OUTPUT__");  // DefaultOutputName(i), without a string of its own
      put_int(i);
      *p++ = '"';
    } else if (i < dumped_names_.size() && !dumped_names_[i].empty()) {
      put(dumped_names_[i]);
    } else {
      *p++ = '"';
      put(output_names_[i]);
      *p++ = '"';
    }
    put(",\"shape\":[");
    for (size_t d = 0; d < outputs_[i].shape.size(); ++d) {
      if (d) *p++ = ',';
      put_int(outputs_[i].shape[d]);
    }
    *p++ = ']';
    if (shm_offsets_) {
      // The token is ours (hex) and needs no escaping.
      put(",\"shm\":{\"region\":\"");
      put(shm_region_);
      put("\",\"offset\":");
      put_int((*shm_offsets_)[i]);
      *p++ = '}';
    }
    *p++ = '}';
  }
  put("],\"timing_us\":{\"queue\":");
  put_int(timing_.queue_us);
  put(",\"compute\":");
  put_int(timing_.compute_us);
  // Pipeline stages only for a model that has them (docs/protocol.md, "Replies").
  if (timing_.decode_us >= 0) {
    put(",\"decode\":");
    put_int(timing_.decode_us);
  }
  if (timing_.preprocess_us >= 0) {
    put(",\"preprocess\":");
    put_int(timing_.preprocess_us);
  }
  if (timing_.postprocess_us >= 0) {
    put(",\"postprocess\":");
    put_int(timing_.postprocess_us);
  }
  put(",\"total\":");
  put_int(timing_.total_us);
  put("},\"worker\":");
  put_int(worker_id_);
  *p++ = '}';
  return p;
}

std::string MakeOkReply(const json& id, const std::vector<TensorSpec>& outputs,
                        const std::vector<std::string>& output_names, const StageTimes& timing,
                        int worker_id, const std::string& shm_region,
                        const std::vector<uint64_t>* shm_offsets) {
  const OkReplyText text(id, outputs, output_names, timing, worker_id, shm_region, shm_offsets);
  std::string out(text.bound(), '\0');
  out.resize(static_cast<size_t>(text.Write(out.data()) - out.data()));
  return out;
}

std::string MakeErrorReply(const json& id, const Status& status) {
  json j = {{"v", kProtocolVersion},
            {"id", id},
            {"status", "error"},
            {"code", StatusCodeName(status.code())},
            {"message", status.message()}};
  // Error messages may quote client bytes; never let invalid UTF-8 break the reply itself.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ParseReplyHeaderJson(std::string_view text, ReplyHeader* out) {
  *out = ReplyHeader{};
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Internal("reply header is not a JSON object");
  out->raw = j;
  if (auto id = j.find("id"); id != j.end()) out->id = *id;
  std::string status = j.value("status", "");
  if (status == "error") {
    auto code = ParseStatusCode(j.value("code", "INTERNAL"));
    out->status = Status(code.value_or(StatusCode::kInternal), j.value("message", ""));
    return Status::Ok();
  }
  if (status != "ok") return Internal("reply header has no valid 'status'");
  auto outputs = j.find("outputs");
  if (outputs == j.end() || !outputs->is_array()) return Internal("reply header has no 'outputs'");
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string where = "outputs[" + std::to_string(i) + "]";
    json entry = (*outputs)[i];
    if (entry.is_object() && entry.contains("shm")) {
      ShmRef ref;
      Status s = ShmRefFromJson(entry["shm"], where + ".shm", false, &ref);
      if (!s.ok()) return Internal("bad reply: " + s.message());
      out->output_shm.resize(outputs->size());
      out->output_shm[i] = std::move(ref);
      entry.erase("shm");
    }
    TensorSpec spec;
    Status s = TensorSpecFromJson(entry, where, false, &spec);
    if (!s.ok()) return Internal("bad reply: " + s.message());
    out->outputs.push_back(std::move(spec));
    const json* name = entry.is_object() && entry.contains("name") ? &entry["name"] : nullptr;
    if (name && !name->is_string()) {
      return Internal("bad reply: " + where + ".name: expected a string, got " + name->dump());
    }
    out->output_names.push_back(name ? name->get<std::string>() : DefaultOutputName(i));
  }
  if (auto t = j.find("timing_us"); t != j.end() && t->is_object()) {
    out->timing.queue_us = t->value("queue", int64_t{0});
    out->timing.compute_us = t->value("compute", int64_t{0});
    out->timing.total_us = t->value("total", int64_t{0});
    out->timing.decode_us = t->value("decode", int64_t{-1});
    out->timing.preprocess_us = t->value("preprocess", int64_t{-1});
    out->timing.postprocess_us = t->value("postprocess", int64_t{-1});
  }
  out->worker_id = j.value("worker", -1);
  return Status::Ok();
}

namespace {

// "key": of the reply's fixed layout.
bool TakeKey(HeaderScanner& in, std::string_view key) {
  std::string_view read;
  return in.String(&read, kKeyChar) && read == key && in.Take(':');
}

bool ScanSigned(HeaderScanner& in, int64_t max, int64_t* out) {
  uint64_t value;
  if (!in.Unsigned(&value) || value > static_cast<uint64_t>(max)) return false;
  *out = static_cast<int64_t>(value);
  return true;
}

// "timing_us":{"queue":N,"compute":N[,"decode":N][,"preprocess":N][,"postprocess":N],"total":N}
bool ScanTiming(HeaderScanner& in, StageTimes* timing) {
  if (!TakeKey(in, "timing_us") || !in.Take('{')) return false;
  if (!TakeKey(in, "queue") || !ScanSigned(in, INT64_MAX, &timing->queue_us)) return false;
  if (!in.Take(',') || !TakeKey(in, "compute") || !ScanSigned(in, INT64_MAX, &timing->compute_us)) {
    return false;
  }
  for (;;) {
    if (!in.Take(',')) return false;
    std::string_view key;
    if (!in.String(&key, kKeyChar) || !in.Take(':')) return false;
    int64_t* field = key == "decode"        ? &timing->decode_us
                     : key == "preprocess"  ? &timing->preprocess_us
                     : key == "postprocess" ? &timing->postprocess_us
                     : key == "total"       ? &timing->total_us
                                            : nullptr;
    // Each optional stage at most once and in MakeOkReply's order; "total" ends the object.
    if (field == nullptr || (field != &timing->total_us && *field != -1)) return false;
    if (!ScanSigned(in, INT64_MAX, field)) return false;
    if (field == &timing->total_us) return in.Take('}');
  }
}

}  // namespace

bool ParseReplyHeaderFast(std::string_view text, ReplyHeader* out) {
  ReplyHeader reply;
  HeaderScanner in(text);
  std::string_view status;
  if (!in.Take('{') || !TakeKey(in, "v") || !in.Literal("1") || !in.Take(',') ||
      !TakeKey(in, "id") || !ScanId(in, &reply.id) || !in.Take(',') || !TakeKey(in, "status") ||
      !in.String(&status, kKeyChar) || status != "ok" || !in.Take(',') || !TakeKey(in, "outputs") ||
      !in.Take('[')) {
    return false;
  }
  if (!in.Take(']')) {
    do {
      TensorSpec spec;
      std::string_view name;
      if (!ScanTensorSpec(in, kMaxRank, &spec, &name)) return false;
      reply.output_names.push_back(name.empty() ? DefaultOutputName(reply.outputs.size())
                                                : std::string(name));
      reply.outputs.push_back(std::move(spec));
    } while (in.Take(','));
    if (!in.Take(']')) return false;
  }
  reply.timing.decode_us = reply.timing.preprocess_us = reply.timing.postprocess_us = -1;
  int64_t worker = -1;
  if (!in.Take(',') || !ScanTiming(in, &reply.timing) || !in.Take(',') || !TakeKey(in, "worker") ||
      !ScanSigned(in, INT32_MAX, &worker) || !in.Take('}') || !in.AtEnd()) {
    return false;
  }
  reply.worker_id = static_cast<int>(worker);
  reply.status = Status::Ok();
  *out = std::move(reply);
  return true;
}

Status ParseReplyHeader(std::string_view text, ReplyHeader* out) {
  return ParseReplyHeaderJson(text, out);
}

Status ParseReplyHeaderLean(std::string_view text, ReplyHeader* out) {
  if (ParseReplyHeaderFast(text, out)) return Status::Ok();
  return ParseReplyHeaderJson(text, out);
}

}  // namespace torchfarm
