// FarmChannel: see farm_channel.h. The reply mailbox's eventfd is readable while a reply waits
// (frontend_hub.h), but asio's epoll reactor sees edges: a push into the empty mailbox. So each
// wake-up reads until the mailbox is empty, on this thread, before the wait is armed again; a
// reply pushed meanwhile leaves an edge that the next epoll_wait, after the re-arm, reports.
#include "supervisor/frontend/farm_channel.h"

#include <unistd.h>

#include <charconv>

#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include "common/log.h"
#include "supervisor/frontend/typed_frame.h"

namespace torchfarm {

namespace asio = boost::asio;

FarmChannel::FarmChannel(FrontendHub& hub) : hub_(hub) {}

FarmChannel::~FarmChannel() { Stop(); }

Status FarmChannel::Start() {
  try {
    replies_ = std::make_unique<FrontendMailbox>();
  } catch (const std::system_error& e) {
    return Internal(std::string("front-end channel: no reply mailbox: ") + e.what());
  }
  // asio owns (and closes) the descriptor it watches; the mailbox keeps its own.
  const int fd = ::dup(replies_->fd());
  if (fd < 0) return Internal("front-end channel: dup of the reply mailbox's eventfd failed");
  replies_fd_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  identity_ = hub_.Attach(replies_.get());
  WatchReplies();
  thread_ = std::thread([this] {
    auto guard = asio::make_work_guard(io_);
    // An exception out of a handler would end the whole supervisor (std::terminate on this
    // thread): it is logged and the thread serves on; the throwing handler's connection or call
    // is dropped with its captures.
    while (true) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        TF_LOG(kError) << "front-end channel: a handler threw; its request is dropped"
                       << Kv("error", e.what());
      }
    }
  });
  return Status::Ok();
}

void FarmChannel::Stop() {
  if (!thread_.joinable()) {
    if (identity_.size() > 0) hub_.Detach(identity_);  // attached, but the thread never ran
    return;
  }
  stopping_ = true;
  asio::post(io_, [this] {
    FailAll(Unavailable("the supervisor is shutting down"));
    boost::system::error_code ignored;
    replies_fd_->cancel(ignored);
    io_.stop();
  });
  thread_.join();
  // From here the loop's replies to this channel are dropped (ReplyWriter counts them "gone");
  // the ones already in the mailbox go with it, their calls failed above.
  hub_.Detach(identity_);
  replies_fd_.reset();
  replies_.reset();
}

void FarmChannel::set_request_limits(const RequestLimits& limits) {
  max_header_bytes_.store(limits.max_header_bytes, std::memory_order_relaxed);
  max_inputs_.store(limits.max_inputs, std::memory_order_relaxed);
}

RequestLimits FarmChannel::request_limits() const {
  RequestLimits limits;
  limits.max_header_bytes = max_header_bytes_.load(std::memory_order_relaxed);
  limits.max_inputs = max_inputs_.load(std::memory_order_relaxed);
  return limits;
}

void FarmChannel::Post(std::function<void()> work) { asio::post(io_, std::move(work)); }

void FarmChannel::Call(const std::string& tag, nlohmann::json header,
                       std::vector<zmq::message_t> frames, Done done) {
  if (stopping_) {
    done(FarmReply{Unavailable("the supervisor is shutting down"), {}, {}});
    return;
  }
  const uint64_t id = next_id_;
  header["id"] = id;
  // A model name comes percent-decoded from a URL and may be any bytes: the strict dump() would
  // throw on invalid UTF-8 (out of the handler, out of io_.run(): std::terminate). Replaced
  // bytes name no model, so the loop answers NOT_FOUND.
  const std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (tag != kMetaTag && text.size() > max_header_bytes_.load(std::memory_order_relaxed)) {
    // The loop would refuse it too; ToFarmRequest's check names the field for v2 requests.
    done(FarmReply{InvalidArgument("the request's farm header is " + std::to_string(text.size()) +
                                   " bytes, over limits.max_header_bytes (" +
                                   std::to_string(max_header_bytes_.load()) + ")"),
                   {},
                   {}});
    return;
  }
  Send(tag, false, zmq::message_t(text.data(), text.size()), std::move(frames), std::move(done));
}

void FarmChannel::Call(const std::string& tag, RequestHeader header,
                       std::vector<zmq::message_t> frames, Done done) {
  if (stopping_) {
    done(FarmReply{Unavailable("the supervisor is shutting down"), {}, {}});
    return;
  }
  // The header's size was checked where it was built (ToRequestHeader); the loop sets its id.
  zmq::message_t boxed;
  try {
    boxed = MakeTypedFrame(std::move(header));
  } catch (const zmq::error_t& e) {
    done(
        FarmReply{Unavailable(std::string("front-end channel: send failed: ") + e.what()), {}, {}});
    return;
  }
  Send(tag, true, std::move(boxed), std::move(frames), std::move(done));
}

void FarmChannel::Send(const std::string& tag, bool typed, zmq::message_t header,
                       std::vector<zmq::message_t> frames, Done done) {
  const uint64_t id = next_id_++;
  FrontendRequest request;
  request.call_id = id;
  request.tag = tag;
  request.typed = typed;
  request.frames.reserve(2 + frames.size());
  try {
    request.frames.emplace_back(identity_.data(), identity_.size());
  } catch (const zmq::error_t& e) {  // libzmq out of memory
    done(FarmReply{Unavailable(std::string("front-end channel: send failed: ") + e.what()), {}, {}});
    return;
  }
  request.frames.push_back(std::move(header));
  for (auto& frame : frames) request.frames.push_back(std::move(frame));
  waiting_.emplace(id, Waiting{std::move(done), tag == kMetaTag});
  pending_count_.store(waiting_.size(), std::memory_order_relaxed);
  hub_.requests().Push(std::move(request));
}

namespace {

// An error's message as a text reply would carry it: MakeErrorReply writes it with invalid UTF-8
// replaced (a message may quote client bytes), so a typed one is made the same. ASCII is left as
// it is without a look at nlohmann.
void AsReplyText(Status* status) {
  if (status->ok()) return;
  const std::string& message = status->message();
  for (char c : message) {
    if (static_cast<unsigned char>(c) < 0x80) continue;
    *status =
        Status(status->code(),
               nlohmann::json::parse(nlohmann::json(message).dump(
                                         -1, ' ', false, nlohmann::json::error_handler_t::replace))
                   .get<std::string>());
    return;
  }
}

}  // namespace

void FarmChannel::WatchReplies() {
  replies_fd_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [this](const boost::system::error_code& error) {
                            if (error || stopping_) return;
                            DrainReplies();
                            WatchReplies();
                          });
}

void FarmChannel::DrainReplies() {
  std::vector<zmq::message_t> frames;
  while (replies_->Pop(&frames)) {
    if (frames.empty()) continue;
    FarmReply reply;
    const std::string_view text(static_cast<const char*>(frames[0].data()), frames[0].size());
    Status parsed = Status::Ok();
    ReplyHeader* typed = TypedFrameValue<ReplyHeader>(frames[0]);
    if (typed) {
      // The answer to a typed request: nothing to parse.
      reply.header = std::move(*typed);
      AsReplyText(&reply.header.status);
    } else {
      // The typed fields only (no JSON object) for an infer answer; a metadata answer, read from
      // `raw` by the caller, is parsed again whole below.
      parsed = ParseReplyHeaderLean(text, &reply.header);
    }
    const auto id = reply.header.id.is_number_unsigned() ? reply.header.id.get<uint64_t>() : 0;
    auto it = waiting_.find(id);
    if (it == waiting_.end()) {
      // The loop answers every call with its id (farm_channel.h): this is a bug, made visible.
      unmatched_.fetch_add(1, std::memory_order_relaxed);
      TF_LOG(kError) << "front-end channel: reply for no waiting call dropped"
                     << Kv("id", reply.header.id.dump())
                     << Kv("status", reply.header.status.ToString())
                     << Kv("parse", parsed.ToString());
      continue;
    }
    Done done = std::move(it->second.done);
    const bool meta = it->second.meta;
    waiting_.erase(it);
    if (meta && !typed && reply.header.raw.is_null()) {
      parsed = ParseReplyHeader(text, &reply.header);
    }
    pending_count_.store(waiting_.size(), std::memory_order_relaxed);
    reply.status = parsed.ok() ? reply.header.status : parsed;
    // A metadata answer has no tensors: it is well formed when the loop said "ok".
    if (meta && reply.header.raw.is_object() && reply.header.raw.value("status", "") == "ok") {
      reply.status = Status::Ok();
      reply.header.status = Status::Ok();
    }
    frames.erase(frames.begin());
    reply.frames = std::move(frames);
    // A handler that throws loses its own call only: the drain goes on, since replies left in
    // the mailbox would raise no new edge for asio's edge-triggered wait (frontend_hub.h).
    try {
      done(std::move(reply));
    } catch (const std::exception& e) {
      TF_LOG(kError) << "front-end channel: a reply's handler threw; its call is dropped"
                     << Kv("error", e.what());
    }
  }
}

void FarmChannel::FailAll(const Status& status) {
  auto waiting = std::move(waiting_);
  waiting_.clear();
  pending_count_.store(0, std::memory_order_relaxed);
  for (auto& [id, call] : waiting) call.done(FarmReply{status, {}, {}});
}

}  // namespace torchfarm
