#include "torchfarm/multi_client.h"

#include "request_codec.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/log.h"

namespace torchfarm {

using nlohmann::json;

struct MultiClient::PendingRequest {
  // Frame 0 is the header, then one frame per input; shared with libzmq while a send is queued.
  std::vector<std::shared_ptr<const std::string>> frames;
  TimePoint deadline;
  int endpoint = -1;             // where it is outstanding; -1: waiting for a live endpoint
  std::vector<bool> refused_by;  // endpoints that answered RESOURCE_EXHAUSTED or UNAVAILABLE
  std::vector<std::string> tried;
  bool from_infer = false;
  std::optional<ReadyReply> last_refusal;
};

using client_internal::CheckInputViews;
using client_internal::EncodeRequestHeader;
using client_internal::ReplyIdOf;

namespace {

// libzmq drops its reference from its I/O thread once the frame is sent or discarded.
void ReleaseShared(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const std::string>*>(hint);
}

// protocol.md "Liveness probe": an empty model name, answered at once by the supervisor's loop.
std::string ProbeHeader(uint64_t id) {
  return json{{"v", kProtocolVersion}, {"id", id}, {"model", ""}, {"inputs", json::array()}}.dump();
}

Status DecodeFrames(const std::vector<std::string>& frames, const ReplyHeader& header,
                    std::vector<Tensor>* outputs) {
  if (frames.size() - 1 != header.outputs.size()) {
    return Internal("malformed reply: header lists " + std::to_string(header.outputs.size()) +
                    " output(s), message has " + std::to_string(frames.size() - 1) +
                    " data frame(s)");
  }
  for (size_t i = 0; i < header.outputs.size(); ++i) {
    auto expected = ByteSize(header.outputs[i]);
    if (!expected || *expected != frames[i + 1].size()) {
      return Internal("malformed reply: outputs[" + std::to_string(i) + "] " +
                      SpecToString(header.outputs[i]) + " does not match its frame of " +
                      std::to_string(frames[i + 1].size()) + " bytes");
    }
    outputs->push_back(Tensor{header.outputs[i], frames[i + 1], header.output_names[i]});
  }
  return Status::Ok();
}

bool IsRefusal(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted || s.code() == StatusCode::kUnavailable;
}

std::string JoinEndpoints(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& e : list) out += (out.empty() ? "" : ", ") + e;
  return out;
}

EndpointPoolOptions PoolOptions(const MultiClientOptions& o) {
  EndpointPoolOptions p;
  p.heartbeat = Millis(o.heartbeat_ms);
  p.eject_after = Millis(o.eject_after_ms);
  p.probe_backoff = Millis(o.probe_backoff_ms);
  p.max_probe_backoff = Millis(o.max_probe_backoff_ms);
  p.refusal_cooldown = Millis(o.refusal_cooldown_ms);
  return p;
}

}  // namespace

MultiClient::MultiClient(const std::vector<std::string>& endpoints, MultiClientOptions options)
    : endpoints_(endpoints),
      options_(options),
      pool_(endpoints.size(), PoolOptions(options)),
      status_(endpoints.size()),
      context_(std::make_unique<zmq::context_t>(1)),
      sockets_(endpoints.size()) {
  if (endpoints_.empty())
    connect_status_ = InvalidArgument("MultiClient needs at least one endpoint");
  for (size_t i = 0; i < endpoints_.size() && connect_status_.ok(); ++i) {
    status_[i].endpoint = endpoints_[i];
    connect_status_ = OpenSocket(static_cast<int>(i));
  }
}

MultiClient::~MultiClient() = default;

Status MultiClient::OpenSocket(int endpoint) {
  auto& socket = sockets_[endpoint];
  socket.reset();  // LINGER 0: whatever was queued for the old connection is dropped
  try {
    socket = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::reconnect_ivl, 100);
    socket->set(zmq::sockopt::reconnect_ivl_max, 1000);
    if (const ClientSecurity& security = options_.security; security.enabled()) {
      for (const std::string* key :
           {&security.server_public_key, &security.public_key, &security.secret_key}) {
        if (!IsCurveKey(*key)) {
          socket.reset();
          return InvalidArgument("ClientSecurity: every key must be 40 Z85 characters");
        }
      }
      socket->set(zmq::sockopt::curve_serverkey, security.server_public_key);
      socket->set(zmq::sockopt::curve_publickey, security.public_key);
      socket->set(zmq::sockopt::curve_secretkey, security.secret_key);
    }
    socket->connect(endpoints_[endpoint]);
  } catch (const zmq::error_t& e) {
    socket.reset();
    return InvalidArgument("cannot connect to '" + endpoints_[endpoint] + "': " + e.what());
  }
  return Status::Ok();
}

bool MultiClient::SendFrames(int endpoint,
                             const std::vector<std::shared_ptr<const std::string>>& frames) {
  zmq::socket_t* socket = sockets_[endpoint].get();
  if (socket == nullptr) return false;
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto* hint = new std::shared_ptr<const std::string>(frames[i]);
      zmq::message_t message(const_cast<char*>(frames[i]->data()), frames[i]->size(),
                             &ReleaseShared, hint);
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      // A DEALER takes all frames of a message or none, so only the first can fail.
      if (!socket->send(message, flags)) return false;
    }
  } catch (const zmq::error_t& e) {
    TF_LOG(kWarn) << "send failed" << Kv("endpoint", endpoints_[endpoint]) << Kv("error", e.what());
    return false;
  }
  return true;
}

void MultiClient::Dispatch(uint64_t id, PendingRequest& request, TimePoint now) {
  for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const int endpoint = pool_.Pick(request.refused_by, now);
    if (endpoint == EndpointPool::kAllRefused && request.last_refusal) {
      ReadyReply reply = std::move(*request.last_refusal);
      Complete(id, std::move(reply));  // `request` is gone after this
      return;
    }
    if (endpoint < 0) return;  // every endpoint is ejected: wait for a probe to succeed
    if (SendFrames(endpoint, request.frames)) {
      request.endpoint = endpoint;
      pool_.OnRequestSent(endpoint, now);
      ++status_[endpoint].sent;
      if (std::find(request.tried.begin(), request.tried.end(), endpoints_[endpoint]) ==
          request.tried.end()) {
        request.tried.push_back(endpoints_[endpoint]);
      }
      return;
    }
    // Its outbound queue is full: a peer that takes nothing is as good as dead.
    if (pool_.Eject(endpoint, now)) HandleEjection(endpoint, now);
  }
}

void MultiClient::DispatchWaiting(TimePoint now) {
  if (pool_.live_count() == 0) return;
  std::vector<uint64_t> waiting;
  for (const auto& [id, request] : pending_) {
    if (request->endpoint < 0) waiting.push_back(id);
  }
  for (uint64_t id : waiting) {
    auto it = pending_.find(id);
    if (it != pending_.end() && it->second->endpoint < 0) Dispatch(id, *it->second, now);
  }
}

void MultiClient::HandleEjection(int endpoint, TimePoint now) {
  ++status_[endpoint].ejections;
  size_t moved = 0;
  for (auto& [id, request] : pending_) {
    if (request->endpoint != endpoint) continue;
    request->endpoint = -1;  // DispatchWaiting sends it elsewhere
    ++moved;
  }
  for (auto it = probes_.begin(); it != probes_.end();) {
    it = it->second == endpoint ? probes_.erase(it) : std::next(it);
  }
  TF_LOG(kWarn) << "endpoint ejected: no answer" << Kv("endpoint", endpoints_[endpoint])
                << Kv("silent_ms", options_.eject_after_ms) << Kv("requests_resent", moved);
  OpenSocket(endpoint);  // drops whatever is still queued for the dead connection
  (void)now;
}

void MultiClient::SendProbe(int endpoint, TimePoint now) {
  const uint64_t id = next_id_++;
  auto header = std::make_shared<const std::string>(ProbeHeader(id));
  if (SendFrames(endpoint, {header})) probes_[id] = endpoint;
  pool_.OnProbeSent(endpoint, now);
}

void MultiClient::Complete(uint64_t id, ReadyReply reply) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  reply.id = id;
  if (it->second->from_infer) {
    infer_ready_[id] = std::move(reply);
  } else {
    ready_.push_back(std::move(reply));
  }
  pending_.erase(it);
}

void MultiClient::HandleMessage(int endpoint, std::vector<std::string>& frames, TimePoint now) {
  if (pool_.OnMessage(endpoint, now)) {
    ++status_[endpoint].readmissions;
    for (auto it = probes_.begin(); it != probes_.end();) {
      it = it->second == endpoint ? probes_.erase(it) : std::next(it);
    }
    TF_LOG(kInfo) << "endpoint back in rotation" << Kv("endpoint", endpoints_[endpoint]);
  }
  ReadyReply reply;
  Status parsed = ParseReplyHeader(frames[0], &reply.result.header);
  uint64_t id = 0;
  if (!ReplyIdOf(reply.result.header.id, &id) || probes_.erase(id) > 0) return;
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // stale or duplicate: that request already has its answer
  PendingRequest& request = *it->second;
  ++status_[endpoint].results;
  if (request.endpoint >= 0) pool_.OnRequestDone(request.endpoint);
  request.endpoint = -1;
  if (!parsed.ok()) {
    reply.status = Internal("malformed reply: " + parsed.message());
  } else if (!reply.result.header.status.ok()) {
    reply.status = reply.result.header.status;
  } else {
    reply.status = DecodeFrames(frames, reply.result.header, &reply.result.outputs);
  }
  if (IsRefusal(reply.status)) {
    pool_.OnRefused(endpoint, now);
    request.refused_by[endpoint] = true;
    request.last_refusal = std::move(reply);
    Dispatch(id, request, now);  // another endpoint, or the refusal when all refused
    return;
  }
  Complete(id, std::move(reply));
}

void MultiClient::ExpireRequests(TimePoint now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, request] : pending_) {
    if (request->deadline <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    PendingRequest& request = *pending_[id];
    if (request.endpoint >= 0) pool_.OnRequestDone(request.endpoint);
    ReadyReply reply;
    reply.status =
        Status(StatusCode::kDeadlineExceeded,
               "no reply within " + std::to_string(options_.io_timeout_ms) + " ms (" +
                   (request.tried.empty() ? "no endpoint was live"
                                          : "endpoints tried: " + JoinEndpoints(request.tried)) +
                   ")");
    Complete(id, std::move(reply));
  }
}

TimePoint MultiClient::NextWake(TimePoint until) const {
  TimePoint wake = until;
  if (auto pool_due = pool_.NextDeadline()) wake = std::min(wake, *pool_due);
  for (const auto& entry : pending_) wake = std::min(wake, entry.second->deadline);
  return wake;
}

void MultiClient::Pump(TimePoint until) {
  std::vector<zmq::pollitem_t> items;
  std::vector<int> owners;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    if (!sockets_[i]) continue;
    items.push_back({sockets_[i]->handle(), 0, ZMQ_POLLIN, 0});
    owners.push_back(static_cast<int>(i));
  }
  // Capped so a wait "forever" stays a plain number of milliseconds.
  auto wait = std::chrono::ceil<Millis>(NextWake(until) - Clock::now()).count();
  wait = std::min<int64_t>(wait, 60'000);
  try {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(std::max<int64_t>(wait, 0)));
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
  for (size_t k = 0; k < items.size(); ++k) {
    if (!(items[k].revents & ZMQ_POLLIN)) continue;
    // Bounded per turn so one busy endpoint cannot starve time-driven work.
    for (int n = 0; n < 256 && sockets_[owners[k]]; ++n) {
      std::vector<zmq::message_t> messages;
      if (!zmq::recv_multipart(*sockets_[owners[k]], std::back_inserter(messages),
                               zmq::recv_flags::dontwait)) {
        break;
      }
      std::vector<std::string> frames;
      for (const auto& m : messages) frames.push_back(m.to_string());
      if (!frames.empty()) HandleMessage(owners[k], frames, Clock::now());
    }
  }
  const TimePoint now = Clock::now();
  EndpointPool::Due due = pool_.Tick(now);
  for (int endpoint : due.eject) HandleEjection(endpoint, now);
  for (int endpoint : due.probe) SendProbe(endpoint, now);
  ExpireRequests(now);
  DispatchWaiting(now);
}

Status MultiClient::Send(const std::string& model, const std::vector<TensorView>& inputs,
                         const InferOptions& options, uint64_t* id) {
  *id = 0;
  if (!connect_status_.ok()) return connect_status_;
  if (client_internal::UsesShm(inputs, options)) {
    std::string list;
    for (const auto& endpoint : endpoints_) list += (list.empty() ? "" : ", ") + endpoint;
    return InvalidArgument(
        "MultiClient: a shared-memory tensor needs a client with one endpoint (torchfarm::Client): "
        "a region belongs to one supervisor, and this client spreads requests over " +
        std::to_string(endpoints_.size()) + " (" + list + ")");
  }
  if (Status s = CheckInputViews(inputs); !s.ok()) return s;
  const uint64_t request_id = next_id_++;
  auto request = std::make_unique<PendingRequest>();
  request->frames.push_back(
      std::make_shared<const std::string>(EncodeRequestHeader(request_id, model, inputs, options)));
  for (const auto& view : inputs) {
    request->frames.push_back(
        std::make_shared<const std::string>(static_cast<const char*>(view.data), view.nbytes));
  }
  const TimePoint now = Clock::now();
  request->deadline = now + Millis(options_.io_timeout_ms);
  request->refused_by.assign(endpoints_.size(), false);
  PendingRequest& ref = *request;
  pending_[request_id] = std::move(request);
  Dispatch(request_id, ref, now);
  *id = request_id;
  return Status::Ok();
}

bool MultiClient::TakeReady(uint64_t id, ReadyReply* out) {
  auto it = infer_ready_.find(id);
  if (it == infer_ready_.end()) return false;
  *out = std::move(it->second);
  infer_ready_.erase(it);
  return true;
}

Status MultiClient::Infer(const std::string& model, const std::vector<TensorView>& inputs,
                          InferResult* result, const InferOptions& options) {
  *result = InferResult{};
  uint64_t id = 0;
  Status s = Send(model, inputs, options, &id);
  if (!s.ok()) return s;
  // Send may have answered it already (every endpoint refused): move it to infer_ready_.
  if (auto it = pending_.find(id); it != pending_.end()) it->second->from_infer = true;
  for (auto it = ready_.begin(); it != ready_.end(); ++it) {
    if (it->id != id) continue;
    infer_ready_[id] = std::move(*it);
    ready_.erase(it);
    break;
  }
  ReadyReply reply;
  // The request's own deadline guarantees an answer; the extra second only guards the loop.
  const TimePoint give_up = Clock::now() + Millis(options_.io_timeout_ms) + std::chrono::seconds(1);
  while (!TakeReady(id, &reply)) {
    if (Clock::now() >= give_up)
      return Internal("MultiClient: request " + std::to_string(id) + " lost");
    Pump(give_up);
  }
  *result = std::move(reply.result);
  return reply.status;
}

Status MultiClient::Receive(InferResult* result, uint64_t* id, int timeout_ms) {
  *result = InferResult{};
  *id = 0;
  if (!connect_status_.ok()) return connect_status_;
  const TimePoint until = timeout_ms < 0 ? TimePoint::max() : Clock::now() + Millis(timeout_ms);
  for (;;) {
    if (!ready_.empty()) {
      ReadyReply reply = std::move(ready_.front());
      ready_.pop_front();
      *id = reply.id;
      *result = std::move(reply.result);
      return reply.status;
    }
    if (outstanding() == 0)
      return InvalidArgument("Receive: no request is outstanding; call Send first");
    if (Clock::now() >= until) {
      return Status(StatusCode::kDeadlineExceeded,
                    "no reply within " + std::to_string(timeout_ms) + " ms");
    }
    Pump(until);
  }
}

size_t MultiClient::outstanding() const {
  size_t n = ready_.size();
  for (const auto& entry : pending_) n += entry.second->from_infer ? 0 : 1;
  return n;
}

std::vector<EndpointStatus> MultiClient::endpoint_status() const {
  std::vector<EndpointStatus> out = status_;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].live = pool_.state(static_cast<int>(i)) == EndpointPool::State::kLive;
    out[i].outstanding = pool_.outstanding(static_cast<int>(i));
  }
  return out;
}

}  // namespace torchfarm
