#include "supervisor/dispatch/reply_writer.h"

#include <cerrno>
#include <utility>

#include "common/log.h"
#include "common/shm_reference.h"
#include "common/tensor_names.h"
#include "ipc/guarded_copy.h"
#include "supervisor/frontend/typed_frame.h"
#include "supervisor/intake/job_intake.h"

namespace torchfarm {

namespace {
const std::vector<std::string> kNoNames;

// The request's ROUTER routing id, viewed in its frame (what the backlog counts replies under).
std::string_view RoutingId(const PendingRequest& request) {
  return {static_cast<const char*>(request.identity.data()), request.identity.size()};
}
}  // namespace

Status ReplyWriter::AcquireQuota(PendingRequest& request, zmq::message_t& header_frame,
                                 bool per_key) {
  if (request.origin == RequestOrigin::kZmq) {
    request.client = ClientKey(request.identity, header_frame, per_key);
  }
  if (!quota_.TryAcquire(request.client)) {
    return ResourceExhausted(
        "this client already has " + std::to_string(quota_.held(request.client)) +
        " requests queued or running, the most one client may have "
        "(limits.max_queued_per_client); wait for replies before sending more");
  }
  request.quota_held = true;
  return Status::Ok();
}

Status ReplyWriter::CheckUnread(const PendingRequest& request) const {
  if (request.origin != RequestOrigin::kZmq) return Status::Ok();
  const ReplyBacklog::Counts unread = backlog_.Of(RoutingId(request));
  if (unread.replies < max_unread_replies_ && unread.bytes < max_unread_bytes_) {
    return Status::Ok();
  }
  return ResourceExhausted(
      "this client has " + std::to_string(unread.replies) + " replies (" +
      std::to_string(unread.bytes) + " bytes) it has not read yet; the most is " +
      std::to_string(max_unread_replies_) + " replies or " + std::to_string(max_unread_bytes_) +
      " bytes (limits.max_unread_replies_per_client, max_unread_reply_bytes_per_client): read "
      "replies before sending more");
}

void ReplyWriter::CountUndeliverable(const PendingRequest& request, int error) {
  const bool gone = error == EHOSTUNREACH;
  ++(gone ? undeliverable_.gone : undeliverable_.full);
  if (undeliverable_hook_) undeliverable_hook_(gone ? "gone" : "full");
  // One line a second at most: a client that vanished with many replies due is one event.
  ++unlogged_undeliverable_;
  const TimePoint now = Clock::now();
  if (now - last_undeliverable_log_ < Millis(1'000)) return;
  TF_LOG(kWarn) << (gone ? "replies to clients that disconnected were not delivered"
                         : "replies to clients whose pipe is full were not delivered")
                << Kv("replies", unlogged_undeliverable_) << Kv("last_id", request.id.dump())
                << Kv("protocol", std::string(RequestOriginName(request.origin)));
  last_undeliverable_log_ = now;
  unlogged_undeliverable_ = 0;
}

bool ReplyWriter::SendEnvelope(PendingRequest& request) {
  zmq::socket_t& socket = jobs_;
  ++jobs_sends_;
  // ROUTER_MANDATORY decides on the first frame: unknown peer (EHOSTUNREACH) or a full pipe
  // (EAGAIN); once it is taken, the rest of the message is too.
  try {
    if (socket.send(request.identity, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return true;
    }
    CountUndeliverable(request, EAGAIN);
  } catch (const zmq::error_t& e) {
    CountUndeliverable(request, e.num());
  }
  return false;
}

void ReplyWriter::ReleaseHeld(PendingRequest& request) {
  if (request.quota_held) {
    quota_.Release(request.client);
    request.quota_held = false;
  }
  // The request is done with its client regions: let go of them before the client can see the
  // reply, so a region released meanwhile has lost its name by then (the frames over it first).
  request.frames.clear();
  request.input_regions.clear();
  request.output_region.reset();
  request.output_places.clear();
}

void ReplyWriter::SendTyped(PendingRequest& request, ReplyHeader header,
                            std::vector<zmq::message_t>* frames) {
  const bool has_frames = frames && !frames->empty();
  ReleaseHeld(request);
  if (!frontend_) {  // no front end runs: nobody to answer (a test's loop)
    if (frames) frames->clear();
    return;
  }
  SendToFrontend(request, MakeTypedFrame(std::move(header)), has_frames ? frames : nullptr);
  if (frames) frames->clear();
}

void ReplyWriter::SendToFrontend(PendingRequest& request, zmq::message_t header,
                                 std::vector<zmq::message_t>* frames) {
  FrontendMessage message;
  message.reserve(1 + (frames ? frames->size() : 0));
  message.push_back(std::move(header));
  if (frames) {
    for (auto& frame : *frames) message.push_back(std::move(frame));
  }
  // False: the channel has stopped (the farm is shutting down) and already answered its call
  // UNAVAILABLE, so nothing is lost and nothing is counted, as with the inproc socket before.
  frontend_->Reply(request.identity, std::move(message));
}

ReplyHeader ReplyWriter::OkReplyHeader(const PendingRequest& request, const BatchShare& share,
                                       std::vector<TensorSpec> outputs,
                                       const std::vector<std::string>& names) {
  ReplyHeader header;
  header.id = request.id;
  header.status = Status::Ok();
  header.outputs = std::move(outputs);
  header.output_names.reserve(header.outputs.size());
  for (size_t i = 0; i < header.outputs.size(); ++i) {
    header.output_names.push_back(i < names.size() ? names[i] : DefaultOutputName(i));
  }
  header.timing = share.timing;
  header.worker_id = share.worker_id;
  return header;
}

void ReplyWriter::Send(PendingRequest& request, std::string header,
                       std::vector<zmq::message_t>* frames) {
  const bool has_frames = frames && !frames->empty();
  ReleaseHeld(request);
  if (request.origin != RequestOrigin::kZmq && frontend_) {
    SendToFrontend(request, zmq::message_t(header.data(), header.size()),
                   has_frames ? frames : nullptr);
    if (frames) frames->clear();
    return;
  }
  SendOnJobs(request, header.size(), ReplyBacklog::CopiedText{header}, frames);
}

uint64_t ReplyWriter::FrameBytes(const std::vector<zmq::message_t>* frames) {
  uint64_t bytes = 0;
  if (frames) {
    for (const auto& frame : *frames) bytes += frame.size();
  }
  return bytes;
}

template <typename Write>
void ReplyWriter::SendOnJobs(PendingRequest& request, size_t bound, const Write& write,
                             std::vector<zmq::message_t>* frames) {
  zmq::socket_t& socket = jobs_;
  const bool has_frames = frames && !frames->empty();
  // Everything that allocates happens before the envelope goes: once its first frame is taken, a
  // throw would leave the ROUTER mid-message and the next reply's envelope in this one's body.
  // Keyed by the routing id, read before sending empties the message.
  zmq::message_t header_frame =
      backlog_.TrackedHeader(RoutingId(request), bound, FrameBytes(frames), write);
  if (!SendEnvelope(request)) {
    if (frames) frames->clear();  // pinned frames let go of their slot now, not at the next reply
    return;
  }
  if (request.has_delimiter) socket.send(zmq::message_t(), zmq::send_flags::sndmore);
  socket.send(header_frame, has_frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
  if (!has_frames) return;
  for (size_t i = 0; i < frames->size(); ++i) {
    socket.send((*frames)[i],
                i + 1 < frames->size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void ReplyWriter::SendError(PendingRequest& request, const Status& status) {
  if (request.typed) {
    ReplyHeader header;
    header.id = request.id;
    header.status = status;
    SendTyped(request, std::move(header), nullptr);
    return;
  }
  Send(request, MakeErrorReply(request.id, status), nullptr);
}

Status ReplyWriter::SendOutputs(PendingRequest& request, BatchShare share) {
  const std::vector<std::string>& names = share.output_names ? *share.output_names : kNoNames;
  std::vector<std::pair<const uint8_t*, uint64_t>>& slices = slices_;  // its bytes per output
  slices.clear();
  for (size_t i = 0; i < share.outputs.size(); ++i) {
    slices.push_back(share.view->OutputRows(i, share.first_row, request.rows));
    if (share.batched) share.outputs[i].shape[0] = request.rows;
  }
  frames_.clear();
  if (!request.output_places.empty()) return SendPlacedOutputs(request, share, names, slices);
  if (request.output_shm.used()) {
    // In place, ReadResponse checked the worker put the outputs at these offsets.
    Status placed = PlaceOutputs(share.outputs, request.output_shm, &shm_offsets_);
    if (placed.ok() && !share.outputs_in_place) placed = CheckRegionsIntact(request);
    for (size_t i = 0; placed.ok() && !share.outputs_in_place && i < slices.size(); ++i) {
      if (!ipc::GuardedCopy(request.output_region->data() + shm_offsets_[i], slices[i].first,
                            slices[i].second)) {
        placed = InvalidArgument("output_shm: the region shrank while output " +
                                 std::to_string(i) + " was written into it");
      }
    }
    if (!placed.ok()) return placed;
    const std::string region = request.output_shm.region;
    Send(request,
         MakeOkReply(request.id, share.outputs, names, share.timing, share.worker_id, region,
                     &shm_offsets_),
         &frames_);
    return Status::Ok();
  }
  // A client with replies still in its pipe may not be reading: a pinned slot would wait on it,
  // and the worker with it. Its replies are copied, which frees the slot at once.
  const bool reading =
      request.origin != RequestOrigin::kZmq || backlog_.Of(RoutingId(request)).replies == 0;
  for (const auto& [bytes, length] : slices) {
    if (share.may_pin && reading && length >= kZeroCopyMinBytes) {
      frames_.push_back(share.ring->PinFrame(bytes, length));
    } else {
      frames_.emplace_back(bytes, length);
    }
  }
  if (request.typed) {
    SendTyped(request, OkReplyHeader(request, share, std::move(share.outputs), names), &frames_);
    return Status::Ok();
  }
  if (request.origin != RequestOrigin::kZmq && frontend_) {
    Send(request, MakeOkReply(request.id, share.outputs, names, share.timing, share.worker_id),
         &frames_);
    return Status::Ok();
  }
  // Send's job-socket path, the header written straight into the block its frame owns. The text's
  // rare allocations (an id or a name to escape) come before the request lets go, as in Send.
  const OkReplyText text(request.id, share.outputs, names, share.timing, share.worker_id);
  ReleaseHeld(request);
  SendOnJobs(
      request, text.bound(), [&text](char* out) { return text.Write(out); }, &frames_);
  return Status::Ok();
}

Status ReplyWriter::SendPlacedOutputs(
    PendingRequest& request, const BatchShare& share, const std::vector<std::string>& names,
    const std::vector<std::pair<const uint8_t*, uint64_t>>& slices) {
  // Its client may have truncated a region since dispatch: check before touching it, then copy
  // under the SIGBUS guard for a truncation during the copy.
  if (Status s = CheckRegionsIntact(request); !s.ok()) return s;
  std::vector<const PendingRequest::PlacedOutput*> placed(share.outputs.size(), nullptr);
  for (size_t i = 0; i < share.outputs.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : DefaultOutputName(i);
    for (const PendingRequest::PlacedOutput& p : request.output_places) {
      if (p.place.name == name) placed[i] = &p;
    }
  }
  for (size_t i = 0; i < share.outputs.size(); ++i) {
    if (!placed[i]) {
      frames_.emplace_back(slices[i].first, slices[i].second);
      continue;
    }
    const OutputPlace& place = placed[i]->place;
    if (slices[i].second > place.ref.bytes) {
      return InvalidArgument("output '" + place.name + "': shared_memory_byte_size is " +
                             std::to_string(place.ref.bytes) + " bytes, the output is " +
                             SpecToString(share.outputs[i]) + ", " +
                             std::to_string(slices[i].second) +
                             " bytes; shared memory size "
                             "specified with the request for output '" +
                             place.name + "' should be at least " +
                             std::to_string(slices[i].second) + " bytes to hold the results");
    }
    if (!ipc::GuardedCopy(placed[i]->region->data() + place.ref.offset, slices[i].first,
                          slices[i].second)) {
      return InvalidArgument("output '" + place.name + "': the region '" + place.ref.region +
                             "' shrank while the output was written into it");
    }
  }
  // The reply names each placed output's region and offset and carries no frame for it
  // (ParseReplyHeader reads "shm"); the front end answers with Triton's parameters.
  if (request.typed) {
    ReplyHeader typed = OkReplyHeader(request, share, share.outputs, names);
    typed.output_shm.resize(share.outputs.size());
    for (size_t i = 0; i < share.outputs.size(); ++i) {
      if (placed[i]) {
        typed.output_shm[i] = ShmRef{placed[i]->place.ref.region, placed[i]->place.ref.offset, 0};
      }
    }
    SendTyped(request, std::move(typed), &frames_);
    return Status::Ok();
  }
  nlohmann::json header = nlohmann::json::parse(
      MakeOkReply(request.id, share.outputs, names, share.timing, share.worker_id));
  for (size_t i = 0; i < share.outputs.size(); ++i) {
    if (!placed[i]) continue;
    header["outputs"][i]["shm"] = {{"region", placed[i]->place.ref.region},
                                   {"offset", placed[i]->place.ref.offset}};
  }
  Send(request, header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), &frames_);
  return Status::Ok();
}

}  // namespace torchfarm
