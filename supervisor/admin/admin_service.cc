#include "supervisor/admin/admin_service.h"

#include "common/number_parse.h"
#include "common/protocol.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

namespace {
constexpr int kMaxRequestsPerTurn = 64;
}  // namespace

json AdminOk(const std::string& message) { return {{"ok", true}, {"message", message}}; }
json AdminError(const std::string& message) { return {{"ok", false}, {"error", message}}; }

void AdminService::Register(std::string name, std::vector<Field> fields, Handler handler) {
  commands_.push_back({std::move(name), std::move(fields), std::move(handler)});
}

std::string AdminService::Usage() const {
  std::string usage = "expected one of";
  for (const Command& c : commands_) {
    usage += " {\"cmd\": \"" + c.name + "\"";
    for (const Field& f : c.fields) {
      usage += ", \"" + f.name + "\": " + (f.is_string ? "NAME" : RangeText(f.min, f.max));
    }
    usage += "}";
  }
  return usage;
}

json AdminService::Run(const json& request) const {
  if (!request.is_object() || !request.contains("cmd") || !request["cmd"].is_string()) {
    return AdminError(Usage() + "; got " + request.dump().substr(0, 200));
  }
  const std::string cmd = request["cmd"];
  for (const Command& c : commands_) {
    if (c.name != cmd) continue;
    for (const Field& f : c.fields) {
      auto it = request.find(f.name);
      if (f.is_string && it != request.end() && it->is_string()) continue;
      if (it == request.end() || f.is_string) {
        return AdminError(cmd + "." + f.name + ": expected " +
                          (f.is_string ? "a string" : "an integer in " + RangeText(f.min, f.max)) +
                          ", got " +
                          (it == request.end() ? std::string("none") : it->dump().substr(0, 100)));
      }
      int64_t value = 0;
      if (Status s = IntegerFromJson(*it, cmd + "." + f.name, f.min, f.max, &value); !s.ok()) {
        return AdminError(s.message());
      }
    }
    return c.handler(request);
  }
  return AdminError("unknown command '" + cmd + "'; " + Usage());
}

void AdminService::HandleRequests(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxRequestsPerTurn && ReceiveMultipart(socket, &frames); ++n) {
    if (frames.size() < 2) continue;
    // Envelope: identity, optional empty delimiter (REQ clients), one JSON frame.
    const bool delimiter = frames.size() > 2 && frames[1].size() == 0;
    // Nesting is bounded before parsing: printing a deep value in the error would recurse.
    json request = JsonNestingWithin(frames.back().to_string_view(), kMaxHeaderDepth)
                       ? json::parse(frames.back().to_string_view(), nullptr, false)
                       : json("nested too deeply");
    json reply = Run(request);
    socket.send(frames[0], zmq::send_flags::sndmore);
    if (delimiter) socket.send(zmq::message_t(), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(reply.dump(-1, ' ', false, json::error_handler_t::replace)),
                zmq::send_flags::none);
  }
}

}  // namespace torchfarm
