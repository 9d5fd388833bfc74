// The admin socket of Supervisor: JSON commands from `torchfarm` tools and probes.
//   {"cmd":"health"} -> {"live":true,"ready":bool,"models":[{"name","ready_workers","workers"}]}
//   {"cmd":"stats"}  -> {"supervisor":{…},"models":[…],"workers":[…]}
#include <unistd.h>

#include "common/log.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

using nlohmann::json;

void Supervisor::HandleAdmin() {
  for (int n = 0; n < 64; ++n) {
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t part;
      if (!admin_.recv(part, frames.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) break;
      bool more = part.more();
      frames.push_back(std::move(part));
      if (!more) break;
    }
    if (frames.empty()) return;
    // Envelope: identity, optional empty delimiter (REQ clients), one JSON frame.
    bool delimiter = frames.size() > 2 && frames[1].size() == 0;
    json request = json::parse(frames.back().to_string_view(), nullptr, false);
    json reply;
    std::string cmd = request.is_object() ? request.value("cmd", "") : "";
    if (cmd == "health") {
      reply = HealthJson();
    } else if (cmd == "stats") {
      reply = StatsJson();
    } else {
      reply = {{"error", "expected {\"cmd\": \"health\"|\"stats\"}, got " +
                             frames.back().to_string().substr(0, 200)}};
    }
    admin_.send(frames[0], zmq::send_flags::sndmore);
    if (delimiter) admin_.send(zmq::message_t(), zmq::send_flags::sndmore);
    admin_.send(zmq::buffer(reply.dump(-1, ' ', false, json::error_handler_t::replace)),
                zmq::send_flags::none);
  }
}

json Supervisor::HealthJson() const {
  json models = json::array();
  bool all_ready = true;
  for (const auto& model : models_) {
    int ready = 0;
    for (size_t i : model.slots) ready += slots_[i]->state() == SlotState::kReady;
    all_ready = all_ready && ready > 0;
    models.push_back({{"name", model.config.name},
                      {"ready_workers", ready},
                      {"workers", model.slots.size()},
                      {"ready", ready > 0}});
  }
  return {{"live", true}, {"ready", all_ready && !draining_}, {"draining", draining_}, {"models", models}};
}

json Supervisor::StatsJson() const {
  TimePoint now = clock_.Now();
  json models = json::array();
  for (const auto& model : models_) {
    uint64_t batches = 0, rows = 0;
    for (size_t i : model.slots) {
      batches += slots_[i]->batches_done;
      rows += slots_[i]->rows_done;
    }
    models.push_back({{"name", model.config.name},
                      {"state", ModelAvailable(model) ? "available" : "unavailable"},
                      {"queue_depth", model.queue.size()},
                      {"requests", model.requests},
                      {"errors", model.errors},
                      {"rejected", model.rejected},
                      {"batches", batches},
                      {"mean_batch_size", batches ? static_cast<double>(rows) / batches : 0.0}});
  }
  json workers = json::array();
  for (const auto& slot : slots_) {
    workers.push_back({{"id", slot->id()},
                       {"model", slot->model_name()},
                       {"pid", slot->pid()},
                       {"device", slot->device()},
                       {"fallback", slot->fallen_back()},
                       {"fallback_reason", slot->fallback_reason()},
                       {"state", SlotStateName(slot->state())},
                       {"generation", slot->generation()},
                       {"restarts", slot->restarts()},
                       {"last_exit", slot->last_exit()},
                       {"requests", slot->requests_done},
                       {"batches", slot->batches_done},
                       {"mean_batch_size", slot->batches_done ? static_cast<double>(slot->rows_done) /
                                                                    slot->batches_done
                                                              : 0.0},
                       {"inflight", slot->inflight()}});
  }
  return {{"supervisor",
           {{"pid", ::getpid()},
            {"uptime_s", ToMicros(now - started_) / 1e6},
            {"version", "0.1.0"},
            {"config", config_.source_path}}},
          {"models", models},
          {"workers", workers}};
}

}  // namespace torchfarm
