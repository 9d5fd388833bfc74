#include "torchfarm/client.h"

#include "request_codec.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <optional>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/log.h"

namespace torchfarm {

using nlohmann::json;

// libzmq frees a zero-copy frame from its I/O thread whenever it is done with it (sent, or dropped
// with the socket); this count lets Infer know whether a caller's buffer may still be read.
struct Client::FrameReleaseTracker {
  std::mutex mutex;
  std::condition_variable all_released;
  int64_t held = 0;

  void Acquire() {
    std::lock_guard<std::mutex> lock(mutex);
    ++held;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex);
    if (--held == 0) all_released.notify_all();
  }
  bool Idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return held == 0;
  }
  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mutex);
    all_released.wait(lock, [this] { return held == 0; });
  }
};

using client_internal::CheckInputViews;
using client_internal::CheckShmOutputs;
using client_internal::EncodeRequestHeader;
using client_internal::ReadShmCreated;
using client_internal::ReplyIdOf;

namespace {

void ReleaseFrame(void* /*data*/, void* hint) {
  static_cast<Client::FrameReleaseTracker*>(hint)->Release();
}

// Checks the data frames against the outputs the header lists and copies them out; or, for a
// request with output_shm, that the outputs lie in its range.
Status DecodeOutputs(const std::vector<zmq::message_t>& frames, const ReplyHeader& header,
                     const ShmRef& output_shm, std::vector<Tensor>* outputs) {
  if (output_shm.used()) return CheckShmOutputs(header, frames.size() - 1, output_shm);
  if (!header.output_shm.empty()) {
    return Internal(
        "malformed reply: outputs in shared memory, but the request named no "
        "output_shm");
  }
  if (frames.size() - 1 != header.outputs.size()) {
    return Internal("malformed reply: header lists " + std::to_string(header.outputs.size()) +
                    " output(s), message has " + std::to_string(frames.size() - 1) +
                    " data frame(s)");
  }
  for (size_t i = 0; i < header.outputs.size(); ++i) {
    const zmq::message_t& frame = frames[i + 1];
    auto expected = ByteSize(header.outputs[i]);
    if (!expected || *expected != frame.size()) {
      return Internal(
          "malformed reply: outputs[" + std::to_string(i) + "] " + SpecToString(header.outputs[i]) +
          " needs " + (expected ? std::to_string(*expected) : std::string("too many")) +
          " bytes, frame " + std::to_string(i + 1) + " has " + std::to_string(frame.size()));
    }
    outputs->push_back(Tensor{header.outputs[i], frame.to_string(), header.output_names[i]});
  }
  return Status::Ok();
}

// Waits until a message arrives or `deadline` passes (nullopt: forever); false on timeout.
bool ReceiveFrames(zmq::socket_t& socket, std::optional<TimePoint> deadline,
                   std::vector<zmq::message_t>* frames) {
  for (;;) {
    long wait_ms = -1;
    if (deadline) {
      auto left = std::chrono::ceil<Millis>(*deadline - Clock::now()).count();
      wait_ms = left > 0 ? static_cast<long>(left) : 0;
    }
    zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      continue;  // a signal interrupted the wait: recompute what is left and wait again
    }
    if (item.revents & ZMQ_POLLIN) {
      frames->clear();
      if (zmq::recv_multipart(socket, std::back_inserter(*frames), zmq::recv_flags::dontwait)) {
        return true;
      }
    }
    if (deadline && Clock::now() >= *deadline) return false;
  }
}

}  // namespace

Client::Client(const std::string& endpoint, int io_timeout_ms)
    : endpoint_(endpoint),
      io_timeout_ms_(io_timeout_ms),
      release_tracker_(std::make_unique<FrameReleaseTracker>()),
      context_(std::make_unique<zmq::context_t>(1)) {
  connect_status_ = Connect();
}

Client::Client(const std::string& endpoint, const ClientSecurity& security, int io_timeout_ms)
    : endpoint_(endpoint),
      security_(security),
      io_timeout_ms_(io_timeout_ms),
      release_tracker_(std::make_unique<FrameReleaseTracker>()),
      context_(std::make_unique<zmq::context_t>(1)) {
  connect_status_ = Connect();
}

Status ClientSecurity::FromFiles(const std::string& server_public_key_file,
                                 const std::string& client_secret_key_file, ClientSecurity* out) {
  ClientSecurity security;
  CurveKeyPair pair;
  if (Status s = ReadCurveKeyFile(server_public_key_file, &security.server_public_key); !s.ok())
    return s;
  if (Status s = ReadCurveSecretKeyFile(client_secret_key_file, &pair); !s.ok()) return s;
  security.public_key = pair.public_key;
  security.secret_key = pair.secret_key;
  *out = std::move(security);
  return Status::Ok();
}

Client::~Client() = default;

Status Client::Connect() {
  try {
    socket_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
    socket_->set(zmq::sockopt::linger, 0);
    // A send blocks only while the outbound queue is full (high-water mark); bound that too.
    socket_->set(zmq::sockopt::sndtimeo, io_timeout_ms_);
    if (security_.enabled()) {
      for (const std::string* key :
           {&security_.server_public_key, &security_.public_key, &security_.secret_key}) {
        if (!IsCurveKey(*key)) {
          socket_.reset();
          return InvalidArgument("ClientSecurity: every key must be 40 Z85 characters (as "
                                 "`torchfarm keygen` writes them)");
        }
      }
      socket_->set(zmq::sockopt::curve_serverkey, security_.server_public_key);
      socket_->set(zmq::sockopt::curve_publickey, security_.public_key);
      socket_->set(zmq::sockopt::curve_secretkey, security_.secret_key);
    }
    socket_->connect(endpoint_);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return InvalidArgument("cannot connect to '" + endpoint_ + "': " + e.what());
  }
  return Status::Ok();
}

Status Client::SendRequest(const std::string& model, const std::vector<TensorView>& inputs,
                           const InferOptions& options, bool zero_copy, uint64_t* id) {
  if (!connect_status_.ok()) return connect_status_;
  Status s = CheckInputViews(inputs);
  if (!s.ok()) return s;
  const uint64_t request_id = next_id_++;
  std::vector<zmq::message_t> frames;
  frames.emplace_back(EncodeRequestHeader(request_id, model, inputs, options));
  for (const auto& view : inputs) {
    if (view.shm.used()) continue;  // its bytes are in a region: no data frame
    if (zero_copy && view.nbytes > 0) {
      frames.emplace_back(const_cast<void*>(view.data), view.nbytes, &ReleaseFrame,
                          release_tracker_.get());
      release_tracker_->Acquire();
    } else {
      frames.emplace_back(view.data, view.nbytes);
    }
  }
  try {
    if (!zmq::send_multipart(*socket_, frames)) {
      return Unavailable("cannot send to " + endpoint_ + ": outbound queue stayed full for " +
                         std::to_string(io_timeout_ms_) + " ms");
    }
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot send to " + endpoint_ + ": " + e.what());
  }
  *id = request_id;
  return Status::Ok();
}

Status Client::AwaitReply(const Awaited& awaited, int timeout_ms, ReadyReply* out) {
  std::optional<TimePoint> deadline;
  if (timeout_ms >= 0) deadline = Clock::now() + Millis(timeout_ms);
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      if (!ReceiveFrames(*socket_, deadline, &frames)) {
        return Status(StatusCode::kDeadlineExceeded, "no reply from " + endpoint_ + " within " +
                                                         std::to_string(timeout_ms) + " ms");
      }
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot receive from " + endpoint_ + ": " + e.what());
    }
    ReadyReply reply;
    Status parsed = ParseReplyHeader(frames[0].to_string_view(), &reply.result.header);
    if (!ReplyIdOf(reply.result.header.id, &reply.id)) {
      TF_LOG(kWarn) << "dropping a reply without a request id" << Kv("endpoint", endpoint_)
                    << Kv("header", frames[0].to_string().substr(0, 200));
      continue;
    }
    const bool wanted = awaited.id != 0 && reply.id == awaited.id;
    ShmRef output_shm = awaited.output_shm;
    if (!wanted) {
      auto it = outstanding_.find(reply.id);
      if (it == outstanding_.end()) {
        TF_LOG(kDebug) << "dropping a stale reply" << Kv("id", reply.id);
        continue;
      }
      output_shm = std::move(it->second);
      outstanding_.erase(it);
    }
    if (wanted && awaited.command) {
      // shm_create / shm_release answers list no outputs; the caller reads header.raw.
      reply.status = reply.result.header.raw.is_object()
                         ? reply.result.header.status
                         : Internal("malformed reply: " + parsed.message());
    } else if (!parsed.ok()) {
      reply.status = Internal("malformed reply: " + parsed.message());
    } else if (!reply.result.header.status.ok()) {
      reply.status = reply.result.header.status;
    } else {
      reply.status = DecodeOutputs(frames, reply.result.header, output_shm, &reply.result.outputs);
    }
    if (wanted || awaited.id == 0) {
      *out = std::move(reply);
      return Status::Ok();
    }
    ready_.push_back(std::move(reply));  // a pipelined reply that arrived during Infer
  }
}

void Client::ResetSocketIfFramesQueued() {
  if (release_tracker_->Idle()) return;
  TF_LOG(kWarn) << "request still queued after its timeout; reconnecting"
                << Kv("endpoint", endpoint_) << Kv("lost_requests", outstanding_.size());
  socket_.reset();  // LINGER 0: libzmq drops every queued frame and releases it
  release_tracker_->WaitIdle();
  outstanding_.clear();
  connect_status_ = Connect();
}

Status Client::Infer(const std::string& model, const std::vector<TensorView>& inputs,
                     InferResult* result, const InferOptions& options) {
  *result = InferResult{};
  uint64_t id = 0;
  Status s = SendRequest(model, inputs, options, /*zero_copy=*/true, &id);
  if (s.ok()) {
    ReadyReply reply;
    s = AwaitReply(Awaited{id, options.output_shm, false}, io_timeout_ms_, &reply);
    if (s.ok()) {
      *result = std::move(reply.result);
      return reply.status;
    }
  }
  // The caller may free its buffers once we return: make sure libzmq no longer holds them.
  if (socket_) ResetSocketIfFramesQueued();
  return s;
}

Status Client::Send(const std::string& model, const std::vector<TensorView>& inputs,
                    const InferOptions& options, uint64_t* id) {
  Status s = SendRequest(model, inputs, options, /*zero_copy=*/false, id);
  if (s.ok()) outstanding_.emplace(*id, options.output_shm);
  return s;
}

Status Client::Receive(InferResult* result, uint64_t* id, int timeout_ms) {
  *result = InferResult{};
  *id = 0;
  if (!connect_status_.ok()) return connect_status_;
  ReadyReply reply;
  if (!ready_.empty()) {
    reply = std::move(ready_.front());
    ready_.pop_front();
  } else if (outstanding_.empty()) {
    return InvalidArgument("Receive: no request is outstanding; call Send first");
  } else {
    Status s = AwaitReply(Awaited{}, timeout_ms, &reply);
    if (!s.ok()) return s;
  }
  *id = reply.id;
  *result = std::move(reply.result);
  return reply.status;
}

Status Client::SendCommand(json header, ReplyHeader* reply) {
  *reply = ReplyHeader{};
  if (!connect_status_.ok()) return connect_status_;
  const uint64_t id = next_id_++;
  header["v"] = kProtocolVersion;
  header["id"] = id;
  Status s = SendRaw({header.dump()});
  if (!s.ok()) return s;
  ReadyReply ready;
  s = AwaitReply(Awaited{id, ShmRef{}, true}, io_timeout_ms_, &ready);
  if (!s.ok()) return s;
  *reply = std::move(ready.result.header);
  return ready.status;
}

Status Client::CreateShm(uint64_t bytes, std::unique_ptr<ShmRegion>* out) {
  out->reset();
  if (bytes == 0) return InvalidArgument("CreateShm: bytes: expected at least 1, got 0");
  ReplyHeader reply;
  Status s = SendCommand({{"op", "shm_create"}, {"bytes", bytes}}, &reply);
  if (!s.ok()) return s;
  std::string token, name;
  uint64_t size = 0;
  if (s = ReadShmCreated(reply.raw, &token, &name, &size); !s.ok()) return s;
  if (size < bytes) {
    s = Internal("malformed reply: shm_create of " + std::to_string(bytes) +
                 " bytes answered a region of " + std::to_string(size));
  } else {
    s = ShmRegion::Map(token, name, size, this, out);
  }
  if (!s.ok()) {
    // Unusable here: release it now rather than leave it to the supervisor's idle timeout.
    if (Status released = ReleaseShm(token); !released.ok()) {
      TF_LOG(kWarn) << "cannot release an unusable shared-memory region" << Kv("name", name)
                    << Kv("error", released.ToString());
    }
  }
  return s;
}

Status Client::ReleaseShm(const std::string& token) {
  ReplyHeader reply;
  return SendCommand({{"op", "shm_release"}, {"region", token}}, &reply);
}

Status Client::SendRaw(const std::vector<std::string>& frames) {
  if (!connect_status_.ok()) return connect_status_;
  if (frames.empty()) return InvalidArgument("SendRaw: a message needs at least one frame");
  std::vector<zmq::message_t> messages;
  for (const auto& frame : frames) messages.emplace_back(frame.data(), frame.size());
  try {
    if (!zmq::send_multipart(*socket_, messages)) {
      return Unavailable("cannot send to " + endpoint_ + ": outbound queue stayed full for " +
                         std::to_string(io_timeout_ms_) + " ms");
    }
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot send to " + endpoint_ + ": " + e.what());
  }
  return Status::Ok();
}

Status Client::ReceiveRaw(std::vector<std::string>* frames, int timeout_ms) {
  frames->clear();
  if (!connect_status_.ok()) return connect_status_;
  std::optional<TimePoint> deadline;
  if (timeout_ms >= 0) deadline = Clock::now() + Millis(timeout_ms);
  std::vector<zmq::message_t> messages;
  try {
    if (!ReceiveFrames(*socket_, deadline, &messages)) {
      return Status(StatusCode::kDeadlineExceeded,
                    "no reply from " + endpoint_ + " within " + std::to_string(timeout_ms) + " ms");
    }
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot receive from " + endpoint_ + ": " + e.what());
  }
  for (const auto& message : messages) frames->push_back(message.to_string());
  return Status::Ok();
}

}  // namespace torchfarm
