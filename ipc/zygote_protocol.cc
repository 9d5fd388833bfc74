#include "ipc/zygote_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace torchfarm::ipc {

using nlohmann::json;

std::string EncodeZygoteLaunch(const ZygoteLaunch& launch) {
  if (launch.zygote) return json{{"type", "fork_zygote"}, {"supervisor", launch.supervisor}}.dump();
  return json{{"type", "launch"},
              {"argv", launch.argv},
              {"env", launch.env},
              {"targets", launch.targets},
              {"supervisor", launch.supervisor}}
      .dump();
}

Status DecodeZygoteLaunch(const std::string& text, ZygoteLaunch* out) {
  json j = json::parse(text, nullptr, false);
  const std::string type = j.is_object() ? j.value("type", "") : "";
  if (type != "launch" && type != "fork_zygote") {
    return InvalidArgument("zygote: expected a launch or fork_zygote message, got '" +
                           text.substr(0, 80) + "'");
  }
  *out = ZygoteLaunch{};
  out->zygote = type == "fork_zygote";
  try {
    out->supervisor = j.at("supervisor").get<pid_t>();
    if (out->zygote) return Status::Ok();
    out->argv = j.at("argv").get<std::vector<std::string>>();
    out->env = j.at("env").get<std::vector<std::string>>();
    out->targets = j.at("targets").get<std::vector<int>>();
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("zygote: malformed launch message: ") + e.what());
  }
  if (out->argv.empty()) return InvalidArgument("zygote: launch message without argv");
  return Status::Ok();
}

Status SendPacket(int socket, const std::string& payload, const std::vector<int>& fds) {
  if (fds.size() > kZygoteMaxFds) return InvalidArgument("zygote: too many descriptors");
  iovec io{const_cast<char*>(payload.data()), payload.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kZygoteMaxFds)] = {};
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    if (::sendmsg(socket, &message, MSG_NOSIGNAL) >= 0) return Status::Ok();
    if (errno == EINTR) continue;
    const std::string error = std::string("zygote: send: ") + std::strerror(errno);
    return errno == EPIPE || errno == ECONNRESET ? Unavailable(error) : Internal(error);
  }
}

Status ReceivePacket(int socket, int timeout_ms, std::string* payload, std::vector<int>* fds) {
  pollfd p{socket, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    return Status(StatusCode::kDeadlineExceeded,
                  "zygote: no answer within " + std::to_string(timeout_ms) + " ms");
  }
  if (ready < 0) return Internal(std::string("zygote: poll: ") + std::strerror(errno));
  payload->assign(kZygoteMaxMessageBytes, '\0');
  iovec io{payload->data(), payload->size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kZygoteMaxFds)] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  fds->clear();
  for (cmsghdr* h = CMSG_FIRSTHDR(&message); h; h = CMSG_NXTHDR(&message, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
      fds->push_back(fd);
    }
  }
  if (n <= 0) {
    const int error = errno;
    for (int fd : *fds) ::close(fd);
    fds->clear();
    if (n == 0) return Unavailable("zygote: peer closed the channel");
    const std::string text = std::string("zygote: receive: ") + std::strerror(error);
    return error == ECONNRESET ? Unavailable(text) : Internal(text);
  }
  if (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    for (int fd : *fds) ::close(fd);
    fds->clear();
    return InvalidArgument("zygote: packet or descriptors truncated");
  }
  payload->resize(static_cast<size_t>(n));
  return Status::Ok();
}

}  // namespace torchfarm::ipc
