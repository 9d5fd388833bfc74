#include "tools/admin_client.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <zmq.hpp>

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr std::string_view kIpcScheme = "ipc://";

}  // namespace

AdminClient::AdminClient(std::string endpoint, int timeout_ms)
    : endpoint_(std::move(endpoint)),
      timeout_ms_(timeout_ms),
      context_(std::make_unique<zmq::context_t>(1)) {}

AdminClient::~AdminClient() = default;

std::string AdminClient::IpcProblem() const {
  if (endpoint_.compare(0, kIpcScheme.size(), kIpcScheme) != 0) return "";
  std::string path = endpoint_.substr(kIpcScheme.size());
  // Abstract sockets ("ipc://@name") have no file to look at.
  if (path.empty() || path[0] == '@') return "";
  if (::access(path.c_str(), F_OK) != 0) {
    return path + " does not exist; is the supervisor running, and is --admin its admin_endpoint?";
  }
  if (::access(path.c_str(), W_OK) != 0) {
    return "cannot write to " + path + " (" + std::strerror(errno) +
           "); the admin socket is mode 0600: run as the supervisor's user";
  }
  return "";
}

Status AdminClient::Call(const json& request, json* reply) {
  *reply = nullptr;
  // libzmq would keep reconnecting to a missing ipc file until the timeout; say why at once.
  if (std::string problem = IpcProblem(); !problem.empty()) {
    return Unavailable("no answer from " + endpoint_ + ": " + problem);
  }
  zmq::message_t answer;
  try {
    zmq::socket_t socket(*context_, zmq::socket_type::req);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, timeout_ms_);
    socket.set(zmq::sockopt::rcvtimeo, timeout_ms_);
    socket.connect(endpoint_);
    std::string text = request.dump();
    bool answered = socket.send(zmq::buffer(text), zmq::send_flags::none).has_value() &&
                    socket.recv(answer).has_value();
    if (!answered) {
      return Unavailable("no answer from " + endpoint_ + " within " + std::to_string(timeout_ms_) +
                         " ms; is the supervisor running?");
    }
  } catch (const zmq::error_t& e) {
    // connect() rejects malformed endpoints ("tcp://nohost", "foo://x") by throwing.
    return InvalidArgument("cannot talk to '" + endpoint_ + "': " + e.what());
  }
  json parsed = json::parse(answer.to_string_view(), nullptr, false);
  if (!parsed.is_object()) {
    return Internal("malformed reply from " + endpoint_ + ": expected a JSON object, got '" +
                    answer.to_string().substr(0, 200) + "'");
  }
  *reply = std::move(parsed);
  return Status::Ok();
}

Status AdminClient::Command(const std::string& cmd, json* reply) {
  return Call(json{{"cmd", cmd}}, reply);
}

std::string AdminReplyError(const json& reply) {
  if (!reply.is_object()) return "reply is not a JSON object";
  auto error = reply.find("error");
  bool has_error = error != reply.end();
  auto ok = reply.find("ok");
  bool ok_false = ok != reply.end() && !(ok->is_boolean() && ok->get<bool>());
  if (!has_error && !ok_false) return "";
  if (has_error) return error->is_string() ? error->get<std::string>() : error->dump();
  return "the server refused the command (\"ok\": false, no \"error\" given)";
}

}  // namespace torchfarm
