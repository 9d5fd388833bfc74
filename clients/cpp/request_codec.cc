#include "request_codec.h"

#include "common/bytes_items.h"

namespace torchfarm::client_internal {

using nlohmann::json;

Status CheckInputViews(const std::vector<TensorView>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& view = inputs[i];
    if (IsBytes(view.spec.dtype)) {
      // Length-prefixed items (common/bytes_items.h): one per element of the shape.
      if (view.shm.used()) {
        return InvalidArgument("inputs[" + std::to_string(i) +
                               "]: a bytes input travels as a data frame, not in shared memory");
      }
      Status s = CheckBytesTensor(
          view.spec, std::string_view(static_cast<const char*>(view.data), view.nbytes),
          kMaxBytesItem, "inputs[" + std::to_string(i) + "]");
      if (!s.ok()) return s;
      continue;
    }
    auto expected = ByteSize(view.spec);
    if (!expected) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: shape " +
                             ShapeToString(view.spec.shape) + " is negative or too large");
    }
    if (view.shm.used()) continue;  // no data frame: nothing of ours is read
    if (*expected != view.nbytes) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: " + SpecToString(view.spec) +
                             " needs " + std::to_string(*expected) + " bytes, got " +
                             std::to_string(view.nbytes));
    }
    if (view.nbytes > 0 && view.data == nullptr) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: data is null");
    }
  }
  return Status::Ok();
}

std::string EncodeRequestHeader(uint64_t id, const std::string& model,
                                const std::vector<TensorView>& inputs, const InferOptions& options) {
  json specs = json::array();
  for (const auto& view : inputs) {
    json entry = TensorSpecToJson(view.spec);
    if (view.shm.used()) entry["shm"] = ShmRefToJson(view.shm, /*is_output=*/false);
    if (!view.name.empty()) entry["name"] = view.name;
    specs.push_back(std::move(entry));
  }
  json header = {{"v", kProtocolVersion},
                 {"id", id},
                 {"model", model},
                 {"inputs", std::move(specs)},
                 {"timeout_ms", options.timeout_ms},
                 {"priority", options.priority}};
  if (options.output_shm.used()) {
    header["output_shm"] = ShmRefToJson(options.output_shm, /*is_output=*/true);
  }
  return header.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool UsesShm(const std::vector<TensorView>& inputs, const InferOptions& options) {
  if (options.output_shm.used()) return true;
  for (const auto& view : inputs) {
    if (view.shm.used()) return true;
  }
  return false;
}

Status ReadShmCreated(const json& header, std::string* token, std::string* name, uint64_t* bytes) {
  auto shm = header.find("shm");
  const bool readable =
      shm != header.end() && shm->is_object() && shm->value("region", json()).is_string() &&
      shm->value("name", json()).is_string() && shm->value("bytes", json()).is_number_unsigned();
  if (!readable || (*shm)["region"].get<std::string>().empty() ||
      (*shm)["bytes"].get<uint64_t>() == 0) {
    return Internal("malformed reply: shm_create answered " +
                    (shm == header.end() ? std::string("no 'shm'") : shm->dump()) +
                    ", expected {\"region\": \"<token>\", \"name\": \"/...\", \"bytes\": N}");
  }
  *token = (*shm)["region"].get<std::string>();
  *name = (*shm)["name"].get<std::string>();
  *bytes = (*shm)["bytes"].get<uint64_t>();
  return Status::Ok();
}

Status CheckShmOutputs(const ReplyHeader& header, size_t data_frames, const ShmRef& range) {
  if (data_frames != 0) {
    return Internal("malformed reply: the request named output_shm, the reply has " +
                    std::to_string(data_frames) + " data frame(s)");
  }
  if (header.output_shm.size() != header.outputs.size()) {
    return Internal("malformed reply: header lists " + std::to_string(header.outputs.size()) +
                    " output(s), " + std::to_string(header.output_shm.size()) +
                    " in shared memory; expected all of them there");
  }
  const uint64_t end = range.offset + range.bytes;
  for (size_t i = 0; i < header.outputs.size(); ++i) {
    const ShmRef& at = header.output_shm[i];
    const uint64_t bytes = ByteSize(header.outputs[i]).value_or(UINT64_MAX);
    if (at.region != range.region || at.offset < range.offset || at.offset > end ||
        bytes > end - at.offset) {
      return Internal("malformed reply: outputs[" + std::to_string(i) + "] " +
                      SpecToString(header.outputs[i]) + " at offset " + std::to_string(at.offset) +
                      " of region '" + at.region + "', expected inside output_shm [" +
                      std::to_string(range.offset) + ", " + std::to_string(end) + ") of region '" +
                      range.region + "'");
    }
  }
  return Status::Ok();
}

bool ReplyIdOf(const json& id, uint64_t* out) {
  if (id.is_number_unsigned()) {
    *out = id.get<uint64_t>();
    return *out != 0;
  }
  if (id.is_number_integer() && id.get<int64_t>() > 0) {
    *out = static_cast<uint64_t>(id.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace torchfarm::client_internal
