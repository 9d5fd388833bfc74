#include "supervisor/intake/job_intake.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "common/model_versions.h"
#include "common/protocol.h"
#include "common/request_header_check.h"
#include "common/tensor_names.h"
#include "ipc/shm_layout.h"

namespace torchfarm {

int TritonPriorityLevel(int priority, const ModelConfig& model) {
  if (priority <= 0 || priority > model.priority_levels) return model.default_priority_level - 1;
  return priority - 1;
}

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

// A front-end request's system shared-memory regions (docs/kserve-v2.md "System shared
// memory"), by the names their client registered: inputs read from them, outputs placed in them.
// Any offset will do: the supervisor copies (the worker never maps a client-named object).
Status ResolveSystemShm(const RequestHeader& header, ClientShmRegistry* regions,
                        PendingRequest* request) {
  if (header.output_shm.used()) {
    return InvalidArgument(
        "header field 'output_shm': the v2 front ends place outputs with "
        "outputs_shm");
  }
  const bool any_input = !header.input_shm.empty();
  if (!any_input && header.output_places.empty()) return Status::Ok();
  if (!regions) {
    return InvalidArgument(
        "system shared memory is off on this farm (frontend."
        "system_shared_memory)");
  }
  if (any_input) request->input_regions.resize(header.inputs.size());
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (!header.input_in_shm(i)) continue;
    const ShmRef& ref = header.input_shm[i];
    const std::string where = i < header.input_names.size()
                                  ? "input '" + header.input_names[i] + "'"
                                  : "inputs[" + std::to_string(i) + "]";
    Status s = regions->ResolveSystem(ref.region, ref.offset, *ByteSize(header.inputs[i]), where,
                                      &request->input_regions[i]);
    if (!s.ok()) return s;
  }
  request->input_shm = header.input_shm;
  for (const OutputPlace& place : header.output_places) {
    PendingRequest::PlacedOutput placed{place, nullptr};
    Status s = regions->ResolveSystem(place.ref.region, place.ref.offset, place.ref.bytes,
                                      "output '" + place.name + "'", &placed.region);
    if (!s.ok()) return s;
    request->output_places.push_back(std::move(placed));
  }
  return Status::Ok();
}

// Looks up every region the header names, checks ranges and alignment, and keeps the regions
// in the request, one entry per input. Front-end requests name system regions only, job-socket
// requests token regions only.
Status ResolveShm(const RequestHeader& header, ClientShmRegistry* regions, TimePoint now,
                  PendingRequest* request, bool front_end) {
  if (front_end) return ResolveSystemShm(header, regions, request);
  if (!header.output_places.empty()) {
    return InvalidArgument(
        "header field 'outputs_shm': only the v2 front ends' requests place "
        "outputs in system shared memory; use output_shm (docs/protocol.md)");
  }
  const bool any_input = !header.input_shm.empty();
  if (!any_input && !header.output_shm.used()) return Status::Ok();
  if (!regions || !regions->enabled()) {
    return InvalidArgument(std::string(any_input ? "inputs[].shm" : "output_shm") +
                           ": client shared memory is disabled (client_shm.enabled)");
  }
  if (any_input) request->input_regions.resize(header.inputs.size());
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (!header.input_in_shm(i)) continue;
    const ShmRef& ref = header.input_shm[i];
    const std::string where = "inputs[" + std::to_string(i) + "].shm";
    const size_t item = DTypeSize(header.inputs[i].dtype);
    if (ref.offset % item != 0) {
      return InvalidArgument(where + ".offset: expected a multiple of " + std::to_string(item) +
                             " (the item size of " + std::string(DTypeName(header.inputs[i].dtype)) +
                             "), got " + std::to_string(ref.offset));
    }
    std::shared_ptr<ipc::SharedRegion> region;
    Status s = regions->Resolve(ref.region, ref.offset, *ByteSize(header.inputs[i]), where, now,
                                &region);
    if (!s.ok()) return s;
    request->input_regions[i] = std::move(region);
  }
  request->input_shm = header.input_shm;
  if (header.output_shm.used()) {
    const ShmRef& ref = header.output_shm;
    Status s = regions->Resolve(ref.region, ref.offset, ref.bytes, "output_shm", now,
                                &request->output_region);
    if (!s.ok()) return s;
    request->output_shm = ref;
  }
  return Status::Ok();
}

// Each input's byte count in the model's order (`frames` from `first_frame` on, one per input not
// in shared memory), after checking the items of every bytes input (common/bytes_items.h): their
// size comes from their frame, not from their shape.
Status CheckBytes(const RequestHeader& header, const std::vector<zmq::message_t>& frames,
                  size_t first_frame, const RequestLimits& limits, std::vector<size_t>* sizes) {
  sizes->clear();
  bool any_bytes = false;
  for (size_t i = 0, frame = first_frame; i < header.inputs.size(); ++i) {
    if (header.input_in_shm(i)) {
      sizes->push_back(static_cast<size_t>(*ByteSize(header.inputs[i])));
      continue;
    }
    sizes->push_back(frames[frame++].size());
    any_bytes = any_bytes || IsBytes(header.inputs[i].dtype);
  }
  if (!any_bytes) return Status::Ok();  // no view list to build (an allocation a request)
  std::vector<std::string_view> data;
  for (size_t i = 0, frame = first_frame; i < header.inputs.size(); ++i) {
    if (header.input_in_shm(i)) continue;
    const zmq::message_t& message = frames[frame++];
    data.emplace_back(static_cast<const char*>(message.data()), message.size());
  }
  return CheckBytesFrames(header, data, limits);
}

std::vector<std::string> InputNames(const ModelConfig& model) {
  std::vector<std::string> names;
  for (size_t k = 0; k < model.inputs.size(); ++k) names.push_back(model.input_name(k));
  return names;
}

// For a request that names its inputs: where each of the model's inputs is in the request
// (*order[k] = request index), or the INVALID_ARGUMENT for an unknown, repeated or missing name.
Status MatchInputNames(const ModelConfig& model, const std::vector<std::string>& given,
                       std::vector<size_t>* order) {
  const std::vector<std::string> names = InputNames(model);
  const std::string takes = " (model '" + model.name + "' takes " + JoinTensorNames(names) + ")";
  constexpr size_t kUnset = SIZE_MAX;
  order->assign(names.size(), kUnset);
  for (size_t i = 0; i < given.size(); ++i) {
    const std::string where = "inputs[" + std::to_string(i) + "].name";
    const auto k = static_cast<size_t>(std::find(names.begin(), names.end(), given[i]) -
                                       names.begin());
    if (k == names.size()) {
      return InvalidArgument(where + ": no input is named \"" + given[i] + "\"" + takes);
    }
    if ((*order)[k] != kUnset) {
      return InvalidArgument(where + ": input \"" + given[i] +
                             "\" is given twice, also as inputs[" + std::to_string((*order)[k]) +
                             "]" + takes);
    }
    (*order)[k] = i;
  }
  for (size_t k = 0; k < names.size(); ++k) {
    if ((*order)[k] == kUnset) {
      return InvalidArgument("inputs: input \"" + names[k] + "\" is missing" + takes);
    }
  }
  return Status::Ok();
}

// Puts a request's named inputs into the model's declared order: their specs, names, shared-
// memory references and data frames (frames[first_frame...], one per input not in shared
// memory, CheckInputFrames matched them). A request without names is left as it came.
Status ArrangeNamedInputs(const ModelConfig& model, RequestHeader* header,
                          std::vector<zmq::message_t>& frames, size_t first_frame) {
  if (header->input_names.empty()) return Status::Ok();
  // The usual request names the model's inputs in its own order: nothing to move, and no error
  // text to prepare.
  const std::vector<std::string>& given = header->input_names;
  bool in_order = given.size() == model.inputs.size();
  for (size_t k = 0; in_order && k < given.size(); ++k) {
    in_order = k < model.input_names.size() ? given[k] == model.input_names[k]
                                            : given[k] == model.input_name(k);
  }
  if (in_order) return Status::Ok();
  std::vector<size_t> order;
  if (Status s = MatchInputNames(model, header->input_names, &order); !s.ok()) return s;
  std::vector<size_t> frame_of(header->inputs.size(), 0);
  for (size_t i = 0, frame = first_frame; i < header->inputs.size(); ++i) {
    if (!header->input_in_shm(i)) frame_of[i] = frame++;
  }
  std::vector<zmq::message_t> moved_frames;
  RequestHeader arranged;
  for (size_t i : order) {
    if (!header->input_in_shm(i)) moved_frames.push_back(std::move(frames[frame_of[i]]));
    arranged.inputs.push_back(std::move(header->inputs[i]));
    arranged.input_names.push_back(std::move(header->input_names[i]));
    if (!header->input_shm.empty()) arranged.input_shm.push_back(std::move(header->input_shm[i]));
  }
  for (size_t f = 0; f < moved_frames.size(); ++f) {
    frames[first_frame + f] = std::move(moved_frames[f]);
  }
  header->inputs = std::move(arranged.inputs);
  header->input_names = std::move(arranged.input_names);
  header->input_shm = std::move(arranged.input_shm);
  return Status::Ok();
}

// A shm_create or shm_release command into *command: client shared memory on, header frame only.
Status TakeShmCommand(const RequestHeader& header, const std::vector<zmq::message_t>& frames,
                      size_t payload_start, ClientShmRegistry* regions, ShmCommand* command) {
  if (!regions || !command || !regions->enabled()) {
    return InvalidArgument("client shared memory is disabled (client_shm.enabled)");
  }
  if (frames.size() - payload_start > 1) {
    return InvalidArgument(
        "shm_create and shm_release take a header frame only, the message "
        "has " +
        std::to_string(frames.size() - payload_start - 1) + " more");
  }
  *command = ShmCommand{header.op, header.shm_bytes, header.shm_region};
  return Status::Ok();
}

// Checks the payload's frame count (limits.max_frames) and total bytes (max_request_bytes): the
// header's `header_bytes` and every data frame after it.
Status CheckMessageSize(const std::vector<zmq::message_t>& frames, size_t payload_start,
                        uint64_t header_bytes, const RequestLimits& limits) {
  if (frames.size() - payload_start > limits.max_inputs + 1) {
    return InvalidArgument("message has more than " + std::to_string(limits.max_inputs + 1) +
                           " frames after the envelope (the header and at most " +
                           std::to_string(limits.max_inputs) + " inputs; limits.max_frames)");
  }
  uint64_t request_bytes = header_bytes;
  for (size_t i = payload_start + 1; i < frames.size(); ++i) request_bytes += frames[i].size();
  if (request_bytes > limits.max_request_bytes) {
    return ResourceExhausted(
        "request of " + std::to_string(request_bytes) + " bytes exceeds the limit of " +
        std::to_string(limits.max_request_bytes) + " (limits.max_request_bytes)");
  }
  return Status::Ok();
}

// Checks the inputs against the model's declared ones and its ring slot; *out: slot bytes taken.
Status CheckInputsAgainstModel(const ModelConfig& model, const RequestHeader& header,
                               const std::vector<size_t>& sizes, uint64_t* out) {
  if (header.inputs.size() != model.inputs.size()) {
    return InvalidArgument("model '" + model.name + "' takes " +
                           std::to_string(model.inputs.size()) + " input(s), got " +
                           std::to_string(header.inputs.size()));
  }
  uint64_t slot_bytes = 0;
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (Status s = CheckAgainstDeclared(model.inputs[i], header.inputs[i], i); !s.ok()) {
      if (header.input_names.empty()) return s;
      return Status(s.code(), "input \"" + header.input_names[i] + "\": " + s.message());
    }
    slot_bytes = ipc::AlignUp(slot_bytes + sizes[i], ipc::kTensorAlignment);
  }
  if (slot_bytes > model.slot_bytes) {
    return ResourceExhausted("request needs " + std::to_string(slot_bytes) +
                             " bytes of ring slot, a slot of model '" + model.name + "' holds " +
                             std::to_string(model.slot_bytes) + " (raise slot_bytes)");
  }
  *out = slot_bytes;
  return Status::Ok();
}

// One frame per input into the request: its data frame, or a frame over its shared memory.
void TakeInputFrames(const RequestHeader& header, const std::vector<size_t>& sizes,
                     std::vector<zmq::message_t>& frames, size_t first_frame,
                     PendingRequest* request) {
  size_t next_frame = first_frame;
  request->frames.reserve(header.inputs.size());
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (!header.input_in_shm(i)) {
      request->frames.push_back(std::move(frames[next_frame++]));
      continue;
    }
    // A frame over the region's bytes: batch assembly copies it into the slot like any other.
    // The region outlives it (input_regions), so there is nothing to free.
    request->frames.emplace_back(request->input_regions[i]->data() + header.input_shm[i].offset,
                                 sizes[i], nullptr, nullptr);
  }
}

}  // namespace

TimePoint DeadlineAfter(TimePoint now, int64_t timeout_ms) {
  if (timeout_ms <= 0 || timeout_ms > kMaxTimeoutMs) return TimePoint::max();
  const Clock::duration timeout = Millis(timeout_ms);  // fits: kMaxTimeoutMs bounds it
  if (timeout >= TimePoint::max() - now) return TimePoint::max();
  return now + timeout;
}

Status ApplyClientDeadline(int64_t deadline_unix_us, int64_t wall_now_us, TimePoint now,
                           PendingRequest* request) {
  if (deadline_unix_us <= 0) return Status::Ok();
  const int64_t left_us = deadline_unix_us - wall_now_us;  // both within [0, INT64_MAX]
  if (left_us <= 0) {
    char late[32];
    std::snprintf(late, sizeof(late), "%.1f", static_cast<double>(-left_us) / 1000.0);
    return Status(StatusCode::kDeadlineExceeded,
                  "the request arrived " + std::string(late) + " ms after its deadline_unix_us (" +
                      std::to_string(deadline_unix_us) + "; the supervisor's wall clock read " +
                      std::to_string(wall_now_us) +
                      "); it never ran. The client's and the supervisor's clocks must agree");
  }
  if (left_us / 1000 > kMaxTimeoutMs) return Status::Ok();
  const TimePoint deadline = now + Micros(left_us);  // fits: kMaxTimeoutMs bounds it
  if (deadline < request->deadline) {
    request->deadline = deadline;
    request->deadline_is_client = true;
  }
  return Status::Ok();
}

int64_t WallClockMicros() {
  return std::chrono::duration_cast<Micros>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

// Everything ParseJob checks once it has an inference header, whichever protocol the header came
// by (ParseJob's JSON, ParseTypedJob's struct): one request structure, one set of checks.
Status IntakeInferenceHeader(RequestHeader& header, uint64_t header_bytes,
                             std::vector<zmq::message_t>& frames, size_t payload_start,
                             const std::vector<ModelConfig>& models, TimePoint now,
                             PendingRequest* request, size_t* model_index,
                             const RequestLimits& limits, ClientShmRegistry* regions,
                             const std::function<bool(size_t index)>& loaded, bool front_end) {
  Status s = CheckMessageSize(frames, payload_start, header_bytes, limits);
  if (!s.ok()) return s;

  size_t index = models.size();
  if (s = SelectServedVersion(models, header.model, header.version, loaded, &index); !s.ok())
    return s;
  const ModelConfig& model = models[index];
  *model_index = index;  // known from here on, so errors below count against the model

  // Reused from request to request on this thread (the loop's, or a test's): no allocation.
  thread_local std::vector<size_t> sizes;
  sizes.clear();
  for (size_t i = payload_start + 1; i < frames.size(); ++i) sizes.push_back(frames[i].size());
  if (s = CheckInputFrames(header, sizes, limits); !s.ok()) return s;
  // From here on the inputs are in the model's order, and sizes[i] is input i's byte count,
  // wherever its bytes are.
  if (s = ArrangeNamedInputs(model, &header, frames, payload_start + 1); !s.ok()) return s;
  if (s = CheckBytes(header, frames, payload_start + 1, limits, &sizes); !s.ok()) return s;
  uint64_t slot_bytes = 0;
  if (s = CheckInputsAgainstModel(model, header, sizes, &slot_bytes); !s.ok()) return s;

  if (s = ResolveShm(header, regions, now, request, front_end); !s.ok()) return s;
  TakeInputFrames(header, sizes, frames, payload_start + 1, request);
  request->inputs = std::move(header.inputs);
  request->slot_bytes = slot_bytes;
  request->received = now;
  request->deadline = DeadlineAfter(now, header.timeout_ms);
  if (header.deadline_unix_us > 0) {
    if (s = ApplyClientDeadline(header.deadline_unix_us, WallClockMicros(), now, request); !s.ok())
      return s;
  }
  request->priority = header.priority;
  request->client_weight = header.client_weight;
  SetRows(request);
  *model_index = index;
  return Status::Ok();
}

}  // namespace

Status ParseJob(std::vector<zmq::message_t>& frames, size_t payload_start,
                const std::vector<ModelConfig>& models, TimePoint now, PendingRequest* request,
                size_t* model_index, const RequestLimits& limits, ClientShmRegistry* regions,
                ShmCommand* command, const std::function<bool(size_t index)>& loaded,
                bool front_end) {
  if (frames.size() <= payload_start) {
    return InvalidArgument(
        "empty message: expected a JSON header frame followed by one frame "
        "per input tensor");
  }
  RequestHeader header;
  const auto& head = frames[payload_start];
  Status s = ParseRequestHeader(
      std::string_view(static_cast<const char*>(head.data()), head.size()), &header, limits);
  request->id = std::move(header.id);
  if (!s.ok()) return s;
  if (header.op != RequestOp::kInfer) {
    if (front_end) return InvalidArgument("header field 'op': the v2 front ends send inferences");
    return TakeShmCommand(header, frames, payload_start, regions, command);
  }
  return IntakeInferenceHeader(header, head.size(), frames, payload_start, models, now, request,
                               model_index, limits, regions, loaded, front_end);
}

Status ParseTypedJob(RequestHeader& header, std::vector<zmq::message_t>& frames,
                     size_t payload_start, const std::vector<ModelConfig>& models, TimePoint now,
                     PendingRequest* request, size_t* model_index, const RequestLimits& limits,
                     ClientShmRegistry* regions, const std::function<bool(size_t index)>& loaded) {
  if (frames.size() <= payload_start) {
    return InvalidArgument(
        "empty message: expected a typed header frame followed by one frame "
        "per input tensor");
  }
  if (header.op != RequestOp::kInfer) {
    return InvalidArgument("header field 'op': the v2 front ends send inferences");
  }
  if (Status s = CheckRequestHeader(header, limits); !s.ok()) return s;
  return IntakeInferenceHeader(header, 0, frames, payload_start, models, now, request, model_index,
                               limits, regions, loaded, /*front_end=*/true);
}

Status CheckRegionsIntact(const PendingRequest& request) {
  auto shrunk = [](const std::string& where, const ipc::SharedRegion& region, uint64_t offset,
                   uint64_t bytes) {
    return InvalidArgument(
        where + ": the region shrank to " + std::to_string(region.CurrentSize()) +
        " bytes after the request was "
        "accepted, it needs bytes [" +
        std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(bytes) +
        "); a region must keep its size while requests use it (the size "
        "shm_create gave it, or the size it had when it was registered)" +
        (region.base_offset() > 0 ? "; the registered region starts at byte " +
                                        std::to_string(region.base_offset()) + " of the object"
                                  : std::string()));
  };
  for (size_t i = 0; i < request.input_regions.size(); ++i) {
    const auto& region = request.input_regions[i];
    if (region && !region->Covers(request.input_shm[i].offset, request.frames[i].size())) {
      return shrunk("inputs[" + std::to_string(i) + "].shm", *region, request.input_shm[i].offset,
                    request.frames[i].size());
    }
  }
  if (request.output_region &&
      !request.output_region->Covers(request.output_shm.offset, request.output_shm.bytes)) {
    return shrunk("output_shm", *request.output_region, request.output_shm.offset,
                  request.output_shm.bytes);
  }
  for (const PendingRequest::PlacedOutput& placed : request.output_places) {
    if (!placed.region->Covers(placed.place.ref.offset, placed.place.ref.bytes)) {
      return shrunk("output '" + placed.place.name + "'", *placed.region, placed.place.ref.offset,
                    placed.place.ref.bytes);
    }
  }
  return Status::Ok();
}

}  // namespace torchfarm
