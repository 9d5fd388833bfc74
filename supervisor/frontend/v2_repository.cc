#include "supervisor/frontend/v2_repository.h"

#include <chrono>
#include <memory>
#include <utility>

#include <boost/asio/steady_timer.hpp>

#include "common/protocol.h"
#include "supervisor/frontend/frontend_endpoint.h"

namespace torchfarm {

using nlohmann::json;

namespace {

using RepoClock = std::chrono::steady_clock;

Status ParseBodyObject(std::string_view body, const char* what, json* out) {
  *out = json::object();
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return Status::Ok();
  if (body.size() > (64 << 10) || !JsonNestingWithin(body, 16)) {
    return InvalidArgument(std::string(what) + " body: expected a small JSON object, got " +
                           std::to_string(body.size()) + " bytes");
  }
  *out = json::parse(body, nullptr, false);
  if (!out->is_object()) {
    return InvalidArgument(
        std::string(what) + " body: expected a JSON object, got " +
        (out->is_discarded() ? std::string("invalid JSON") : std::string(out->type_name())));
  }
  return Status::Ok();
}

// The loop's answer to a repository query: its status, and its JSON when it is "ok".
Status MetaStatus(const FarmReply& reply) {
  const json& raw = reply.header.raw;
  if (raw.is_object() && raw.value("status", "") == "ok") return Status::Ok();
  return reply.status.ok() ? Internal("the farm's repository answer was malformed") : reply.status;
}

void RepositoryQuery(FarmChannel& channel, json query,
                     std::function<void(Status, const json&)> done) {
  channel.Call(kMetaTag, std::move(query), {}, [done = std::move(done)](FarmReply reply) {
    const Status s = MetaStatus(reply);
    done(s, reply.header.raw);
  });
}

// Polls the index of `model` until the load or unload finished; see the header.
struct RepositoryWaiter : std::enable_shared_from_this<RepositoryWaiter> {
  RepositoryWaiter(FarmChannel& c, bool l, std::string m, std::function<void(Status)> d)
      : channel(c), timer(c.io()), load(l), model(std::move(m)), done(std::move(d)) {}

  void Poll() {
    RepositoryQuery(
        channel, {{"repository", "index"}, {"model", model}},
        [self = shared_from_this()](Status s, const json& raw) { self->Check(s, raw); });
  }
  void Check(Status s, const json& raw) {
    if (!s.ok()) return done(s);
    bool finished = true;
    for (const json& m : raw.value("models", json::array())) {
      const std::string state = m.value("state", "");
      if (load && state == "UNAVAILABLE") {
        return done(Internal("loading model '" + model + "' failed: " + m.value("reason", "")));
      }
      if (load ? state != "READY" : state == "UNLOADING") finished = false;
    }
    if (load && raw.value("models", json::array()).empty()) {
      return done(Internal("model '" + model + "' is gone after the load"));
    }
    if (finished) return done(Status::Ok());
    if (RepoClock::now() >= deadline) {
      return done(Unavailable("model '" + model + "' still " + (load ? "loading" : "unloading") +
                              " after " + std::to_string(kRepositoryWaitMs) +
                              " ms (see torchfarm ctl models)"));
    }
    timer.expires_after(std::chrono::milliseconds(kRepositoryPollMs));
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (!error) self->Poll();
    });
  }

  FarmChannel& channel;
  boost::asio::steady_timer timer;
  const bool load;
  const std::string model;
  std::function<void(Status)> done;
  const RepoClock::time_point deadline =
      RepoClock::now() + std::chrono::milliseconds(kRepositoryWaitMs);
};

}  // namespace

Status CheckRepositoryParameter(const std::string& name) {
  if (name == "config" || name.rfind("file:", 0) == 0) {
    return InvalidArgument("parameters." + name.substr(0, 100) +
                           ": not supported; the farm loads the model's entry of its config file "
                           "(change the file, or use torchfarm ctl load --config-json)");
  }
  return Status::Ok();
}

Status ParseRepositoryIndexBody(std::string_view body, bool* ready) {
  json j;
  *ready = false;
  if (Status s = ParseBodyObject(body, "repository index", &j); !s.ok()) return s;
  if (auto it = j.find("ready"); it != j.end()) {
    if (!it->is_boolean()) {
      return InvalidArgument(std::string("repository index body: \"ready\": expected a boolean, "
                                         "got ") +
                             it->type_name());
    }
    *ready = it->get<bool>();
  }
  return Status::Ok();
}

Status ParseRepositoryControlBody(std::string_view body) {
  json j;
  if (Status s = ParseBodyObject(body, "repository load/unload", &j); !s.ok()) return s;
  auto it = j.find("parameters");
  if (it == j.end()) return Status::Ok();
  if (!it->is_object()) {
    return InvalidArgument(std::string("repository load/unload body: \"parameters\": expected an "
                                       "object, got ") +
                           it->type_name());
  }
  for (const auto& [name, value] : it->items()) {
    if (Status s = CheckRepositoryParameter(name); !s.ok()) return s;
  }
  return Status::Ok();
}

void RepositoryIndexCall(FarmChannel& channel, bool ready_only,
                         std::function<void(Status, json)> done) {
  json query = {{"repository", "index"}};
  if (ready_only) query["ready"] = true;
  RepositoryQuery(channel, std::move(query), [done = std::move(done)](Status s, const json& raw) {
    done(s, s.ok() ? raw.value("models", json::array()) : json::array());
  });
}

void RepositoryControlCall(FarmChannel& channel, bool load, const std::string& model,
                           std::function<void(Status)> done) {
  json query = {{"repository", load ? "load" : "unload"}, {"model", model}};
  RepositoryQuery(
      channel, std::move(query),
      [&channel, load, model, done = std::move(done)](Status s, const json& raw) mutable {
        if (!s.ok() || !raw.value("started", false)) return done(s);
        std::make_shared<RepositoryWaiter>(channel, load, model, std::move(done))->Poll();
      });
}

void LogSettingsCall(FarmChannel& channel, json settings, std::function<void(Status, json)> done) {
  RepositoryQuery(channel, {{"logging", std::move(settings)}},
                  [done = std::move(done)](Status s, const json& raw) {
                    done(s, s.ok() ? raw.value("logging", json::object()) : json::object());
                  });
}

void HandleRepositoryHttp(const V2Target& target, const std::string& body, FarmChannel& channel,
                          std::function<void(V2HttpAnswer)> done) {
  if (target.route == V2Route::kLogging) {
    json settings = json::object();
    if (target.model == "POST") {  // ParseV2Target keeps the method there for this route
      if (Status s = ParseBodyObject(body, "logging", &settings); !s.ok()) {
        return done(V2ErrorAnswer(s));
      }
    }
    return LogSettingsCall(channel, std::move(settings),
                           [done = std::move(done)](Status s, json now) {
                             if (!s.ok()) return done(V2ErrorAnswer(s));
                             V2HttpAnswer answer;
                             answer.body = now.dump();
                             done(std::move(answer));
                           });
  }
  if (target.route == V2Route::kRepositoryIndex) {
    bool ready = false;
    if (Status s = ParseRepositoryIndexBody(body, &ready); !s.ok()) return done(V2ErrorAnswer(s));
    return RepositoryIndexCall(channel, ready, [done = std::move(done)](Status s, json models) {
      if (!s.ok()) return done(V2ErrorAnswer(s));
      V2HttpAnswer answer;
      answer.body = models.dump(-1, ' ', false, json::error_handler_t::replace);
      done(std::move(answer));
    });
  }
  if (Status s = ParseRepositoryControlBody(body); !s.ok()) return done(V2ErrorAnswer(s));
  RepositoryControlCall(channel, target.route == V2Route::kRepositoryLoad, target.model,
                        [done = std::move(done)](Status s) {
                          if (!s.ok()) return done(V2ErrorAnswer(s));
                          V2HttpAnswer answer;
                          answer.body = "{}";
                          done(std::move(answer));
                        });
}

}  // namespace torchfarm
