#include "supervisor/security/connection_monitor.h"

#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "common/log.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

Status ConnectionMonitor::Start(zmq::context_t& context, zmq::socket_t& jobs,
                                const std::string& name) {
  const std::string endpoint = "inproc://" + name;
  constexpr int kEvents =
      ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED;
  if (zmq_socket_monitor(jobs.handle(), endpoint.c_str(), kEvents) != 0) {
    return Internal("cannot monitor the job socket: " + std::string(zmq_strerror(zmq_errno())));
  }
  try {
    reader_.emplace(context, zmq::socket_type::pair);
    reader_->set(zmq::sockopt::linger, 0);
    // Unbounded: a dropped DISCONNECTED would leave a connection counted for ever.
    reader_->set(zmq::sockopt::rcvhwm, 0);
    // Connected before the job socket binds, so its LISTENING event is not lost.
    reader_->connect(endpoint);
  } catch (const zmq::error_t& e) {
    reader_.reset();
    return Internal("cannot read the job socket's monitor: " + std::string(e.what()));
  }
  return Status::Ok();
}

void ConnectionMonitor::HandleEvents() {
  if (!reader_) return;
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxEventsPerTurn && ReceiveMultipart(*reader_, &frames); ++n) {
    // Frame 1: the event (uint16) and its value (uint32), native byte order; frame 2: address.
    if (frames.empty() || frames[0].size() < 6) continue;
    uint16_t event = 0;
    uint32_t value = 0;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    std::memcpy(&value, static_cast<const uint8_t*>(frames[0].data()) + sizeof(event),
                sizeof(value));
    OnEvent(event, value);
  }
}

void ConnectionMonitor::OnEvent(uint16_t event, uint32_t value) {
  switch (event) {
    case ZMQ_EVENT_LISTENING:
      guard_.SetJobListener(static_cast<int>(value));
      break;
    case ZMQ_EVENT_ACCEPTED:
      ++accepted_;
      ++open_;
      if (!guard_.interposed() && guard_.max_connections() > 0 &&
          open_ > guard_.max_connections()) {
        // libzmq sees the shut-down connection fail and closes it (DISCONNECTED follows). Were
        // it closed already and its number reused, shutdown would hit another connection: the
        // guard, which refuses before libzmq sees the descriptor, has no such window.
        ::shutdown(static_cast<int>(value), SHUT_RDWR);
        ++shut_down_;
      }
      break;
    case ZMQ_EVENT_DISCONNECTED:
      if (open_ > 0) --open_;
      guard_.JobConnectionClosed();
      break;
    case ZMQ_EVENT_ACCEPT_FAILED:
      ++accept_failed_;
      break;
    default:
      break;
  }
}

void ConnectionMonitor::Report(TimePoint now) {
  const uint64_t refused = this->refused();
  const uint64_t reserve = guard_.refused_reserve();
  if (refused == refused_logged_ && reserve == reserve_logged_) return;
  if (last_log_ != TimePoint{} && now - last_log_ < kLogInterval) return;
  TF_LOG(kWarn) << "connections refused: the job socket serves max_connections at once and the "
                   "last descriptors are kept for admin and workers"
                << Kv("refused_max_connections", refused - refused_logged_)
                << Kv("refused_descriptor_reserve", reserve - reserve_logged_)
                << Kv("job_connections", open_) << Kv("max_connections", guard_.max_connections())
                << Kv("descriptor_limit", guard_.descriptor_limit());
  refused_logged_ = refused;
  reserve_logged_ = reserve;
  last_log_ = now;
}

}  // namespace torchfarm
