// One accepted client request while the supervisor holds it: queued, or in flight on a worker.
//
// Owns: the client's routing envelope and the received tensor frames (zero-copy zmq messages, so
// the only copy of the bytes is the one into the ring slot). An input from a client shared-memory
// region is a frame that points into the region, which the request keeps mapped until it is
// answered, as it does the region its outputs go to. Lives on the supervisor's loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/shm_reference.h"
#include "common/tensor_spec.h"
#include "ipc/shared_region.h"
#include "supervisor/intake/request_origin.h"

namespace torchfarm {

struct PendingRequest {
  zmq::message_t identity;     // ROUTER routing id of the client (or of a front-end channel)
  RequestOrigin origin = RequestOrigin::kZmq;  // the socket the reply goes back on
  bool has_delimiter = false;  // REQ clients put an empty frame before the header; echo it
  // Came as a front end's typed header (frontend/farm_channel.h): answered with a typed reply
  // header, not text (ReplyWriter).
  bool typed = false;
  nlohmann::json id;
  std::vector<TensorSpec> inputs;
  std::vector<zmq::message_t> frames;  // one per input
  // Empty, or one entry per input: where an input in a client region lies (unused: a frame), and
  // the region itself (null for frames), which its frame points into.
  std::vector<ShmRef> input_shm;
  std::vector<std::shared_ptr<ipc::SharedRegion>> input_regions;
  ShmRef output_shm;  // used(): the outputs go to this range of output_region, not to frames
  std::shared_ptr<ipc::SharedRegion> output_region;
  // The v2 front ends' outputs in system shared memory (header "outputs_shm"): each named output
  // is copied into its place in its registered region, which the request keeps mapped.
  struct PlacedOutput {
    OutputPlace place;
    std::shared_ptr<ipc::SharedRegion> region;
  };
  std::vector<PlacedOutput> output_places;
  int64_t rows = 1;         // dim 0 shared by every input; what batching counts
  bool batchable = true;    // false when inputs disagree on dim 0 or a scalar is involved
  uint64_t slot_bytes = 0;  // bytes this request takes in a ring slot (64-byte aligned tensors)
  TimePoint received{};
  TimePoint deadline = TimePoint::max();
  bool deadline_is_queue_wait = false;  // `deadline` is max_queue_wait_ms, not the client's timeout
  bool deadline_is_slo = false;         // `deadline` is the model's latency_slo_ms
  bool deadline_is_client = false;      // `deadline` is the header's deadline_unix_us
  int priority = 0;
  // Fair queueing (supervisor/dispatch/model_queue.h): the virtual time, in weighted rows served
  // by the request's priority level, at which this request's turn starts. Set by ModelQueue::Push.
  int64_t fair_tag = 0;
  // The request's weight in its client's fair share (common/client_weights.h): the header's
  // client_weight (0: none) until intake resolves it against the model's client_weights.
  double client_weight = 1;
  int attempts = 0;  // times this request was handed to a worker that then died
  // What limits.max_queued_per_client, client_weights and fair queueing count by: ClientKey for
  // the job socket; for the front ends, the id frontend.client_id_header named, else
  // "http <peer>" / "grpc <peer>" (supervisor/frontend/frontend_tag.h).
  std::string client;
  bool quota_held = false;  // counted in the supervisor's ClientQuota until answered
};

// How a request travels once accepted: one object from intake to its answer, the queue and the
// batch passing its pointer. Moving the whole request into the queue and again into the batch, and
// destroying each moved-from shell, cost ~500 instructions a request (issue 36).
using HeldRequest = std::unique_ptr<PendingRequest>;

// True when `a` and `b` may share a batch: same number of inputs, and for each input the same
// dtype and the same shape after dim 0.
bool BatchCompatible(const PendingRequest& a, const PendingRequest& b);

}  // namespace torchfarm
