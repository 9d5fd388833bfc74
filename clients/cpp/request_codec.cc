#include "request_codec.h"

namespace torchfarm::client_internal {

using nlohmann::json;

Status CheckInputViews(const std::vector<TensorView>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& view = inputs[i];
    auto expected = ByteSize(view.spec);
    if (!expected) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: shape " +
                             ShapeToString(view.spec.shape) + " is negative or too large");
    }
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
  for (const auto& view : inputs) specs.push_back(TensorSpecToJson(view.spec));
  json header = {{"v", kProtocolVersion},
                 {"id", id},
                 {"model", model},
                 {"inputs", std::move(specs)},
                 {"timeout_ms", options.timeout_ms},
                 {"priority", options.priority}};
  return header.dump(-1, ' ', false, json::error_handler_t::replace);
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
