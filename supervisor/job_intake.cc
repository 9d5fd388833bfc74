#include "supervisor/job_intake.h"

#include "common/protocol.h"
#include "ipc/shm_layout.h"

namespace torchfarm {

bool SplitEnvelope(std::vector<zmq::message_t>& frames, PendingRequest* request,
                   size_t* payload_start) {
  if (frames.empty()) return false;
  request->identity = std::move(frames[0]);
  size_t start = 1;
  if (frames.size() > 1 && frames[1].size() == 0) {
    request->has_delimiter = true;
    start = 2;
  }
  *payload_start = start;
  return true;
}

namespace {

std::string ServedModels(const std::vector<ModelConfig>& models) {
  std::string out;
  for (const auto& m : models) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

// Rows along dim 0 when every input agrees on it; otherwise the request is served alone.
void SetRows(PendingRequest* request) {
  int64_t rows = -1;
  bool batchable = true;
  for (const auto& spec : request->inputs) {
    if (spec.shape.empty()) {
      batchable = false;
      break;
    }
    if (rows == -1) rows = spec.shape[0];
    if (spec.shape[0] != rows) batchable = false;
  }
  request->batchable = batchable && rows > 0;
  request->rows = request->batchable ? rows : 1;
}

}  // namespace

Status ParseJob(std::vector<zmq::message_t>& frames, size_t payload_start,
                const std::vector<ModelConfig>& models, TimePoint now, PendingRequest* request,
                size_t* model_index, const RequestLimits& limits) {
  if (frames.size() <= payload_start) {
    return InvalidArgument("empty message: expected a JSON header frame followed by one frame "
                           "per input tensor");
  }
  RequestHeader header;
  const auto& head = frames[payload_start];
  Status s = ParseRequestHeader(std::string_view(static_cast<const char*>(head.data()), head.size()),
                                &header, limits);
  request->id = std::move(header.id);
  if (!s.ok()) return s;
  if (frames.size() - payload_start > limits.max_inputs + 1) {
    return InvalidArgument("message has more than " + std::to_string(limits.max_inputs + 1) +
                           " frames after the envelope (the header and at most " +
                           std::to_string(limits.max_inputs) + " inputs; limits.max_frames)");
  }
  uint64_t request_bytes = 0;
  for (size_t i = payload_start; i < frames.size(); ++i) request_bytes += frames[i].size();
  if (request_bytes > limits.max_request_bytes) {
    return ResourceExhausted("request of " + std::to_string(request_bytes) +
                             " bytes exceeds the limit of " +
                             std::to_string(limits.max_request_bytes) + " (limits.max_request_bytes)");
  }

  size_t index = models.size();
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].name == header.model) index = i;
  }
  if (index == models.size()) {
    return NotFound("model '" + header.model + "' is not served here (served: " +
                    ServedModels(models) + ")");
  }
  const ModelConfig& model = models[index];
  *model_index = index;  // known from here on, so errors below count against the model

  std::vector<size_t> sizes;
  for (size_t i = payload_start + 1; i < frames.size(); ++i) sizes.push_back(frames[i].size());
  if (s = CheckInputFrames(header, sizes, limits); !s.ok()) return s;
  if (header.inputs.size() != model.inputs.size()) {
    return InvalidArgument("model '" + model.name + "' takes " +
                           std::to_string(model.inputs.size()) + " input(s), got " +
                           std::to_string(header.inputs.size()));
  }
  uint64_t slot_bytes = 0;
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (s = CheckAgainstDeclared(model.inputs[i], header.inputs[i], i); !s.ok()) return s;
    slot_bytes = ipc::AlignUp(slot_bytes + sizes[i], ipc::kTensorAlignment);
  }
  if (slot_bytes > model.slot_bytes) {
    return ResourceExhausted("request needs " + std::to_string(slot_bytes) +
                             " bytes of ring slot, a slot of model '" + model.name + "' holds " +
                             std::to_string(model.slot_bytes) + " (raise slot_bytes)");
  }

  request->inputs = std::move(header.inputs);
  for (size_t i = payload_start + 1; i < frames.size(); ++i) {
    request->frames.push_back(std::move(frames[i]));
  }
  request->slot_bytes = slot_bytes;
  request->received = now;
  if (header.timeout_ms > 0) request->deadline = now + Millis(header.timeout_ms);
  request->priority = header.priority;
  SetRows(request);
  *model_index = index;
  return Status::Ok();
}

}  // namespace torchfarm
