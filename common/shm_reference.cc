#include "common/shm_reference.h"

#include <limits>

#include "common/number_parse.h"

namespace torchfarm {

using nlohmann::json;

namespace {

Status GetOffset(const json& j, const char* key, const std::string& where, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end()) return IntegerOutOfRange(where + "." + key, 0, INT64_MAX, "nothing");
  return IntegerFromJson(*it, where + "." + key, 0, INT64_MAX, out);
}

}  // namespace

Status ShmRefFromJson(const json& j, const std::string& where, bool is_output, ShmRef* out) {
  const char* expected = is_output ? "{\"region\": \"<token>\", \"offset\": N, \"bytes\": N}"
                                   : "{\"region\": \"<token>\", \"offset\": N}";
  if (!j.is_object()) {
    return InvalidArgument(where + ": expected an object " + expected + ", got " + j.type_name());
  }
  ShmRef ref;
  auto region = j.find("region");
  if (region == j.end() || !region->is_string() || region->get<std::string>().empty()) {
    return InvalidArgument(where + ".region: expected the token shm_create returned, got " +
                           (region == j.end() ? std::string("nothing") : region->dump()));
  }
  ref.region = region->get<std::string>();
  Status s = GetOffset(j, "offset", where, &ref.offset);
  if (!s.ok()) return s;
  if (is_output) {
    if (s = GetOffset(j, "bytes", where, &ref.bytes); !s.ok()) return s;
    if (ref.offset % kShmOutputAlignment != 0) {
      return InvalidArgument(where + ".offset: expected a multiple of " +
                             std::to_string(kShmOutputAlignment) + ", got " +
                             std::to_string(ref.offset));
    }
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "region" && key != "offset" && !(is_output && key == "bytes")) {
      return InvalidArgument(where + ": unknown key '" + key + "' (expected " + expected + ")");
    }
  }
  *out = std::move(ref);
  return Status::Ok();
}

Status OutputPlacesFromJson(const json& j, const std::string& where,
                            std::vector<OutputPlace>* out) {
  const char* expected = "[{\"name\", \"region\", \"offset\", \"bytes\"}]";
  if (!j.is_array() || j.empty() || j.size() > kMaxOutputPlaces) {
    return InvalidArgument(where + ": expected an array of 1.." + std::to_string(kMaxOutputPlaces) +
                           " " + expected + ", got " +
                           (j.is_array() ? std::to_string(j.size()) + " entries" : j.type_name()));
  }
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& entry = j[i];
    if (!entry.is_object()) {
      return InvalidArgument(at + ": expected an object " + std::string(expected) + ", got " +
                             entry.type_name());
    }
    auto name = entry.find("name");
    if (name == entry.end() || !name->is_string() || name->get<std::string>().empty()) {
      return InvalidArgument(at + ".name: expected an output name, got " +
                             (name == entry.end() ? std::string("nothing") : name->dump()));
    }
    for (const OutputPlace& earlier : *out) {
      if (earlier.name == name->get<std::string>()) {
        return InvalidArgument(at + ".name: output '" + earlier.name + "' is placed twice");
      }
    }
    // Any offset: the supervisor copies the output there (no alignment, unlike output_shm).
    json ref = entry;
    ref.erase("name");
    ref.erase("bytes");
    OutputPlace place;
    place.name = name->get<std::string>();
    if (Status s = ShmRefFromJson(ref, at, false, &place.ref); !s.ok()) return s;
    if (Status s = GetOffset(entry, "bytes", at, &place.ref.bytes); !s.ok()) return s;
    out->push_back(std::move(place));
  }
  return Status::Ok();
}

json OutputPlacesToJson(const std::vector<OutputPlace>& places) {
  json j = json::array();
  for (const OutputPlace& place : places) {
    json entry = ShmRefToJson(place.ref, true);
    entry["name"] = place.name;
    j.push_back(std::move(entry));
  }
  return j;
}

json ShmRefToJson(const ShmRef& ref, bool is_output) {
  json j = {{"region", ref.region}, {"offset", ref.offset}};
  if (is_output) j["bytes"] = ref.bytes;
  return j;
}

Status RequestOpFromJson(const json& header, RequestOp* out) {
  auto op = header.find("op");
  if (op == header.end()) {
    *out = RequestOp::kInfer;
    return Status::Ok();
  }
  const std::string name = op->is_string() ? op->get<std::string>() : "";
  if (name == "infer") {
    *out = RequestOp::kInfer;
  } else if (name == "shm_create") {
    *out = RequestOp::kShmCreate;
  } else if (name == "shm_release") {
    *out = RequestOp::kShmRelease;
  } else {
    return InvalidArgument("header field 'op': expected \"infer\", \"shm_create\" or "
                           "\"shm_release\", got " + op->dump());
  }
  return Status::Ok();
}

Status PlaceOutputs(const std::vector<TensorSpec>& outputs, const ShmRef& range,
                    std::vector<uint64_t>* offsets) {
  offsets->clear();
  uint64_t used = 0;  // bytes of the range taken so far, relative to range.offset
  for (const auto& spec : outputs) {
    uint64_t start = (used + kShmOutputAlignment - 1) / kShmOutputAlignment * kShmOutputAlignment;
    auto bytes = ByteSize(spec);
    if (!bytes || *bytes > std::numeric_limits<uint64_t>::max() - start) {
      return Internal("output " + SpecToString(spec) + " is too large to place");
    }
    offsets->push_back(range.offset + start);
    used = start + *bytes;
  }
  if (used > range.bytes) {
    return ResourceExhausted("outputs need " + std::to_string(used) +
                             " bytes of output_shm (each at a multiple of " +
                             std::to_string(kShmOutputAlignment) + "), output_shm.bytes is " +
                             std::to_string(range.bytes));
  }
  return Status::Ok();
}

std::string MakeShmCreatedReply(const json& id, const std::string& region, const std::string& name,
                                uint64_t bytes) {
  json j = {{"v", 1},
            {"id", id},
            {"status", "ok"},
            {"shm", {{"region", region}, {"name", name}, {"bytes", bytes}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string MakeShmReleasedReply(const json& id) {
  json j = {{"v", 1}, {"id", id}, {"status", "ok"}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace torchfarm
