// Turns one multipart message from the job socket into a PendingRequest, or into the error reply
// it deserves. Every check a client can fail is here, in the order a client would want to hear of
// them: envelope, header JSON, model name, frame count and sizes, declared dtypes and shapes, and
// the ring slot's capacity; shared-memory references are resolved against the client regions.
//
// Pure: no sockets, no clock beyond the `now` passed in. Runs on the supervisor's loop thread.
#pragma once

#include <functional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/config.h"
#include "common/protocol.h"
#include "common/status.h"
#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/intake/pending_request.h"

namespace torchfarm {

// A request that is a command instead of an inference (docs/protocol.md): shm_create or
// shm_release, with its argument.
struct ShmCommand {
  RequestOp op = RequestOp::kInfer;
  uint64_t bytes = 0;
  std::string region;
};

// A client's timeout_ms beyond this (about 100 years) means no deadline: it is far past any
// request's life, and now + timeout_ms would overflow the clock's nanoseconds (undefined).
constexpr int64_t kMaxTimeoutMs = 36525LL * 24 * 3600 * 1000;  // 100 years of 365.25 days

// The deadline of a request that arrived at `now` with `timeout_ms`: TimePoint::max() (none) for
// 0, for values beyond kMaxTimeoutMs and where the sum would pass the clock's end.
TimePoint DeadlineAfter(TimePoint now, int64_t timeout_ms);

// A client's deadline_unix_us (common/protocol.h) applied to `request`, which arrived at `now`
// (the loop's clock) when the supervisor's wall clock read `wall_now_us`: the nearer of it and
// the request's deadline so far. DEADLINE_EXCEEDED, naming by how much, when it had passed on
// arrival; one more than kMaxTimeoutMs ahead changes nothing.
Status ApplyClientDeadline(int64_t deadline_unix_us, int64_t wall_now_us, TimePoint now,
                           PendingRequest* request);
// The supervisor's wall clock in microseconds since the Unix epoch: read only for a request
// that carries deadline_unix_us (the one place the loop reads the wall clock).
int64_t WallClockMicros();

// A KServe v2 request's "priority" in Triton's meaning as the farm's level (0 is served first):
// 1..priority_levels are levels 0..priority_levels-1; 0, and values past priority_levels, are
// the model's default_priority_level (as Triton's InferenceRequest::SetPriority). ZeroMQ requests
// name the level itself.
int TritonPriorityLevel(int priority, const ModelConfig& model);

// Splits the ROUTER envelope (identity, optional empty delimiter from REQ clients) from the
// payload. Returns false when the message is too short to carry even an identity.
bool SplitEnvelope(std::vector<zmq::message_t>& frames, PendingRequest* request,
                   size_t* payload_start);

// Fills `request` from the payload frames. On error the returned status is the reply to send;
// request->id is set whenever the header was readable. `models` are the served models;
// *model_index is set as soon as the model is known (also when a later check fails). `limits`
// bound the header, the frame count, rank and bytes (config "limits"); the header is read first
// (it is bounded by max_header_bytes) so that even a refusal echoes the request's id.
// `regions` resolves shared-memory references (null: none may be used). A shm_create or
// shm_release command is returned in *command (op != kInfer), not as a request.
// `models` hold one entry per (name, version): the header's "version" picks one, none the default
// (common/model_versions.h, SelectServedVersion, with `loaded` saying which versions have a ready
// worker; empty: all). `front_end`: the request came from the HTTP or gRPC front end; its shared-
// memory references then name system regions (ClientShmRegistry::RegisterSystem, with inputs'
// "shm" and "outputs_shm"), never the job socket's token regions, and it may not be a command.
Status ParseJob(std::vector<zmq::message_t>& frames, size_t payload_start,
                const std::vector<ModelConfig>& models, TimePoint now, PendingRequest* request,
                size_t* model_index, const RequestLimits& limits = RequestLimits{},
                ClientShmRegistry* regions = nullptr, ShmCommand* command = nullptr,
                const std::function<bool(size_t index)>& loaded = {}, bool front_end = false);

// The same for a v2 front end's typed request (frontend/farm_channel.h): `header` was built in
// the supervisor's process (ToRequestHeader) and takes the place of the text of frame
// payload_start, which is not read; the data frames follow it as in ParseJob. `header` gets the
// checks ParseRequestHeader makes of text (common/request_header_check.h), then every check
// ParseJob makes of a header it has read: one request structure and one set of checks for every
// protocol. Always a front-end request (system regions only, no commands); its bytes against
// limits.max_request_bytes are its data frames' (its header is no bytes on a wire). `header` is
// moved from; request->id is left to the caller (the call id).
Status ParseTypedJob(RequestHeader& header, std::vector<zmq::message_t>& frames,
                     size_t payload_start, const std::vector<ModelConfig>& models, TimePoint now,
                     PendingRequest* request, size_t* model_index,
                     const RequestLimits& limits = RequestLimits{},
                     ClientShmRegistry* regions = nullptr,
                     const std::function<bool(size_t index)>& loaded = {});

// OK while every client region `request` reads or writes still covers its range; else the
// INVALID_ARGUMENT to answer with (its client truncated a region after the request was accepted).
Status CheckRegionsIntact(const PendingRequest& request);

}  // namespace torchfarm
