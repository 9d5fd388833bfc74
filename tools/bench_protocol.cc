#include "tools/bench_protocol.h"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/protocol.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr std::string_view kMalformed = "MALFORMED_REPLY";

// Position just after `"key":` (and any blanks) when the key appears at an object boundary, or
// npos. Keys are only matched after '{' or ',' so a key-like text inside a string (always
// escaped there) is never taken for a key.
size_t ValueStart(std::string_view text, std::string_view quoted_key_colon, size_t from = 0) {
  for (size_t at = text.find(quoted_key_colon, from); at != std::string_view::npos;
       at = text.find(quoted_key_colon, at + 1)) {
    size_t before = at;
    while (before > 0 && (text[before - 1] == ' ' || text[before - 1] == '\n')) --before;
    if (before == 0 || (text[before - 1] != '{' && text[before - 1] != ',')) continue;
    size_t value = at + quoted_key_colon.size();
    while (value < text.size() && text[value] == ' ') ++value;
    return value;
  }
  return std::string_view::npos;
}

bool ParseInteger(std::string_view text, size_t at, int64_t* out) {
  if (at == std::string_view::npos || at >= text.size()) return false;
  bool negative = text[at] == '-';
  if (negative) ++at;
  int64_t value = 0;
  size_t start = at;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    value = value * 10 + (text[at] - '0');
    ++at;
  }
  if (at == start || at - start > 18) return false;
  *out = negative ? -value : value;
  return true;
}

// The text of the JSON array starting at `at` ('['), brackets balanced outside strings.
bool ArrayText(std::string_view text, size_t at, std::string_view* out) {
  if (at == std::string_view::npos || at >= text.size() || text[at] != '[') return false;
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']' && --depth == 0) {
      *out = text.substr(at, i - at + 1);
      return true;
    }
  }
  return false;
}

void ScanTiming(std::string_view header, ScannedReply* out) {
  size_t timing = ValueStart(header, "\"timing_us\":");
  if (timing == std::string_view::npos) return;
  size_t end = header.find('}', timing);
  std::string_view object =
      header.substr(timing, end == std::string_view::npos ? end : end - timing + 1);
  ParseInteger(object, ValueStart(object, "\"queue\":"), &out->queue_us);
  ParseInteger(object, ValueStart(object, "\"compute\":"), &out->compute_us);
  ParseInteger(object, ValueStart(object, "\"total\":"), &out->total_us);
}

ScannedReply ScanReplySlow(std::string_view header) {
  ScannedReply out;
  json j = json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    out.code = kMalformed;
    return out;
  }
  if (auto id = j.find("id"); id != j.end() && id->is_number_unsigned())
    out.id = id->get<uint64_t>();
  std::string status = j.value("status", "");
  if (status == "ok") {
    out.ok = true;
    if (auto t = j.find("timing_us"); t != j.end() && t->is_object()) {
      out.queue_us = t->value("queue", int64_t{-1});
      out.compute_us = t->value("compute", int64_t{-1});
      out.total_us = t->value("total", int64_t{-1});
    }
  } else if (status == "error") {
    auto code = j.find("code");
    out.code =
        code != j.end() && code->is_string() ? code->get<std::string>() : std::string(kMalformed);
  } else {
    out.code = kMalformed;
  }
  return out;
}

}  // namespace

RequestTemplate::RequestTemplate(const std::string& model, const std::vector<TensorSpec>& inputs)
    : RequestTemplate(model, inputs, ShmPlacement{}) {}

RequestTemplate::RequestTemplate(const std::string& model, const std::vector<TensorSpec>& inputs,
                                 const ShmPlacement& shm) {
  json specs = json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    json entry = TensorSpecToJson(inputs[i]);
    if (shm.output.used()) {
      entry["shm"] = ShmRefToJson(ShmRef{shm.output.region, shm.input_offsets.at(i), 0}, false);
    }
    specs.push_back(std::move(entry));
  }
  prefix_ = "{\"v\":" + std::to_string(kProtocolVersion) + ",\"id\":";
  suffix_ = ",\"model\":" + json(model).dump() + ",\"inputs\":" + specs.dump();
  if (shm.output.used()) suffix_ += ",\"output_shm\":" + ShmRefToJson(shm.output, true).dump();
  suffix_ += "}";
}

namespace {

// The id and the extras: `<id>[,"timeout_ms":T][,"deadline_unix_us":D]` into `out` (96 bytes
// hold the longest); returns the length.
int IdAndExtras(uint64_t id, const RequestExtras& extras, char* out, size_t capacity) {
  int length = std::snprintf(out, capacity, "%llu", static_cast<unsigned long long>(id));
  if (extras.timeout_ms > 0) {
    length += std::snprintf(out + length, capacity - static_cast<size_t>(length),
                            ",\"timeout_ms\":%lld", static_cast<long long>(extras.timeout_ms));
  }
  if (extras.deadline_unix_us > 0) {
    length += std::snprintf(out + length, capacity - static_cast<size_t>(length),
                            ",\"deadline_unix_us\":%lld",
                            static_cast<long long>(extras.deadline_unix_us));
  }
  return length;
}

}  // namespace

std::string RequestTemplate::Build(uint64_t id, const RequestExtras& extras) const {
  char digits[96];
  const int length = IdAndExtras(id, extras, digits, sizeof(digits));
  std::string header;
  header.reserve(prefix_.size() + suffix_.size() + static_cast<size_t>(length));
  header += prefix_;
  header.append(digits, static_cast<size_t>(length));
  header += suffix_;
  return header;
}

size_t RequestTemplate::BuildInto(uint64_t id, char* out, size_t capacity,
                                  const RequestExtras& extras) const {
  char digits[96];
  const int length = IdAndExtras(id, extras, digits, sizeof(digits));
  const size_t total = prefix_.size() + static_cast<size_t>(length) + suffix_.size();
  if (total > capacity) return 0;
  std::memcpy(out, prefix_.data(), prefix_.size());
  std::memcpy(out + prefix_.size(), digits, static_cast<size_t>(length));
  std::memcpy(out + prefix_.size() + length, suffix_.data(), suffix_.size());
  return total;
}

ScannedReply ScanReply(std::string_view header) {
  ScannedReply out;
  int64_t id = 0;
  size_t status = ValueStart(header, "\"status\":");
  if (!ParseInteger(header, ValueStart(header, "\"id\":"), &id) || id <= 0 ||
      status == std::string_view::npos) {
    return ScanReplySlow(header);
  }
  out.id = static_cast<uint64_t>(id);
  if (header.compare(status, 4, "\"ok\"") == 0) {
    out.ok = true;
    ScanTiming(header, &out);
    return out;
  }
  size_t code = ValueStart(header, "\"code\":");
  if (header.compare(status, 7, "\"error\"") != 0 || code == std::string_view::npos ||
      code >= header.size() || header[code] != '"') {
    return ScanReplySlow(header);
  }
  size_t end = header.find('"', code + 1);
  if (end == std::string_view::npos) return ScanReplySlow(header);
  out.code = std::string(header.substr(code + 1, end - code - 1));
  return out;
}

bool ShmOutputsInRange(std::string_view header, const ShmRef& range, uint64_t* bytes) {
  ReplyHeader reply;
  if (!ParseReplyHeader(header, &reply).ok() || !reply.status.ok() || reply.outputs.empty() ||
      reply.output_shm.size() != reply.outputs.size()) {
    return false;
  }
  const uint64_t end = range.offset + range.bytes;
  *bytes = 0;
  for (size_t i = 0; i < reply.outputs.size(); ++i) {
    const ShmRef& at = reply.output_shm[i];
    const uint64_t size = ByteSize(reply.outputs[i]).value_or(UINT64_MAX);
    if (at.region != range.region || at.offset < range.offset || at.offset > end ||
        size > end - at.offset) {
      return false;
    }
    *bytes += size;
  }
  return true;
}

bool ScanRequestForEcho(std::string_view header, std::string_view* id_text,
                        std::string_view* inputs_text) {
  size_t id = ValueStart(header, "\"id\":");
  if (id == std::string_view::npos) return false;
  size_t end = id;
  while (end < header.size() &&
         ((header[end] >= '0' && header[end] <= '9') || header[end] == '-')) {
    ++end;
  }
  if (end == id || end >= header.size() || (header[end] != ',' && header[end] != '}')) return false;
  *id_text = header.substr(id, end - id);
  return ArrayText(header, ValueStart(header, "\"inputs\":"), inputs_text);
}

std::string MakeEchoReply(std::string_view id_text, std::string_view inputs_text) {
  std::string reply;
  reply.reserve(96 + id_text.size() + inputs_text.size());
  reply += "{\"id\":";
  reply += id_text;
  reply += ",\"outputs\":";
  reply += inputs_text;
  reply += ",\"status\":\"ok\",\"timing_us\":{\"compute\":0,\"queue\":0,\"total\":0},\"v\":";
  reply += std::to_string(kProtocolVersion);
  reply += ",\"worker\":-1}";
  return reply;
}

std::string MakeEchoReplySlow(std::string_view header, bool* ok) {
  RequestHeader request;
  Status s = ParseRequestHeader(header, &request);
  *ok = s.ok();
  if (!s.ok()) return MakeErrorReply(request.id, s);
  return MakeOkReply(request.id, request.inputs, StageTimes{}, -1);
}

}  // namespace torchfarm
