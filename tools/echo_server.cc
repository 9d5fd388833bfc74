#include "tools/echo_server.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <iostream>
#include <vector>
#include <zmq.hpp>

#include "tools/bench_protocol.h"

namespace torchfarm {

namespace {

constexpr int kMaxMessagesPerTurn = 256;

// SIGINT/SIGTERM as a pollable fd, so the loop never runs code in signal context.
class StopSignals {
 public:
  StopSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &previous_);
    fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  ~StopSignals() {
    if (fd_ >= 0) {
      // Consume what arrived: a signal left pending would be delivered, with its default
      // action, the moment the mask is restored.
      signalfd_siginfo info;
      while (::read(fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      }
      ::close(fd_);
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  sigset_t previous_{};
};

// Answers one request (identity, optional REQ delimiter, header, tensors...).
void Echo(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, EchoStats* stats) {
  if (frames.size() < 2) return;
  size_t header_index = frames[1].size() == 0 && frames.size() > 2 ? 2 : 1;
  std::string_view header = frames[header_index].to_string_view();
  std::string_view id, inputs;
  std::string reply;
  bool ok = true;
  if (ScanRequestForEcho(header, &id, &inputs)) {
    reply = MakeEchoReply(id, inputs);
  } else {
    ++stats->fallbacks;
    reply = MakeEchoReplySlow(header, &ok);
  }
  const size_t data_start = header_index + 1;
  const bool has_data = ok && data_start < frames.size();
  for (size_t i = 0; i < header_index; ++i) socket.send(frames[i], zmq::send_flags::sndmore);
  socket.send(zmq::buffer(reply), has_data ? zmq::send_flags::sndmore : zmq::send_flags::none);
  for (size_t i = data_start; has_data && i < frames.size(); ++i) {
    socket.send(frames[i],
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  ++stats->requests;
}

bool ReceiveMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  for (;;) {
    zmq::message_t part;
    if (!socket.recv(part, frames->empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) {
      return false;
    }
    const bool more = part.more();
    frames->push_back(std::move(part));
    if (!more) return true;
  }
}

}  // namespace

Status RunEchoServer(const std::string& endpoint, EchoStats* stats) {
  StopSignals signals;
  if (signals.fd() < 0) return Internal("signalfd failed");
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvhwm, 100'000);  // as the supervisor's job socket
  socket.set(zmq::sockopt::sndhwm, 100'000);
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot bind '" + endpoint + "': " + e.what());
  }
  std::cout << "echo server ready on " << endpoint << std::endl;
  std::vector<zmq::message_t> frames;
  for (;;) {
    zmq::pollitem_t items[] = {{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0},
                               {nullptr, signals.fd(), ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, -1) < 0) continue;
    if (items[1].revents & ZMQ_POLLIN) break;
    for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(socket, &frames); ++n) {
      Echo(socket, frames, stats);
    }
  }
  if (endpoint.rfind("ipc://", 0) == 0) ::unlink(endpoint.substr(6).c_str());
  return Status::Ok();
}

}  // namespace torchfarm
