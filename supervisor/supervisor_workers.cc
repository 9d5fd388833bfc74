// Supervisor, the worker side: control messages, child exits, liveness and hang checks,
// restarts and GPU-to-CPU fallback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "supervisor/dispatch/model_metadata.h"
#include "supervisor/intake/job_intake.h"
#include "supervisor/supervisor.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// Heartbeat "stage_us" and "device" (ipc/control_protocol.h); absent or mistyped fields keep
// their previous value (a malformed heartbeat must not crash the supervisor).
void ReadTelemetry(const json& message, DeviceTelemetry* t) {
  auto number = [](const json& j, const char* key, auto fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<decltype(fallback)>() : fallback;
  };
  t->batches = number(message, "batches", t->batches);
  if (auto stage = message.find("stage_us"); stage != message.end() && stage->is_object()) {
    t->h2d_us = number(*stage, "h2d", t->h2d_us);
    t->compute_us = number(*stage, "compute", t->compute_us);
    t->d2h_us = number(*stage, "d2h", t->d2h_us);
  }
  if (auto device = message.find("device"); device != message.end() && device->is_object()) {
    if (auto name = device->find("name"); name != device->end() && name->is_string()) {
      t->name = name->get<std::string>();
    }
    t->streams = number(*device, "streams", t->streams);
    t->pinned = device->value("pinned", false);
    t->mps_attached = device->value("mps_attached", false);
    t->memory_allocated = number(*device, "memory_allocated", int64_t{-1});
    t->memory_reserved = number(*device, "memory_reserved", int64_t{-1});
  }
}

}  // namespace

void Supervisor::OnChildExit(pid_t pid, int wait_status, TimePoint death) {
  if (zygotes_.OnExit(pid, wait_status, clock_.Now())) return;
  WorkerSlot* slot = workers_.FindByPid(pid);
  if (!slot) return;  // not a worker (an MPS control helper, a stale pid)
  bool expected = IsStoppingWorkers(farm_.phase) || slot->state() == SlotState::kStopping;
  HandleWorkerOutput(*slot);  // what it printed last (a crash message) comes first
  // Batches it finished before it died are answered, not re-run: only what is left in the ring
  // was running or waiting when it died.
  Guarded("responses of an exited worker", [&] { HandleResponses(*slot); });
  const int running = slot->running_batches();
  auto orphans =
      slot->OnExit(wait_status, clock_.Now(), options_.restart, IsStoppingWorkers(farm_.phase));
  // Before the orphans go back to the queue: a ready spare takes the dead worker's place, so the
  // loop's next dispatch sends them to it (a graceful restart's slot is starting again too).
  PromoteSpares(models_[slot->model_index()], death);
  TF_LOG_AT(expected ? LogLevel::kInfo : LogLevel::kWarn) << "worker exited" << Kv("worker", slot->id())
                                   << Kv("pid", pid) << Kv("model", slot->model_name())
                                   << Kv("cause", slot->last_exit())
                                   << Kv("inflight_batches", orphans.size());
  // The oldest batches were running (one on a CPU, one per stream on a GPU); the ones behind
  // them in the ring never started. Requeue in reverse so the queue keeps their order.
  for (size_t i = orphans.size(); i-- > 0;) {
    if (IsStoppingWorkers(farm_.phase)) {
      // The farm is stopping: nothing will run these again.
      for (auto& r : orphans[i].requests) {
        dispatcher_.Fail(models_[slot->model_index()], r,
                    Unavailable("the farm shut down before this request could finish"));
      }
      continue;
    }
    dispatcher_.Requeue(orphans[i], slot->model_index(), slot->last_exit(),
            i < static_cast<size_t>(running));
  }
  if (metrics_ && slot->state() == SlotState::kBackoff && !expected) {
    metrics_->WorkerRestart(slot->model_name(), slot->model_version());
  }
  if (!expected && slot->last_exit_was_device_failure()) RecycleMpsPeers(*slot);
  FailModelIfNoWorkers(models_[slot->model_index()]);
}

void Supervisor::RecycleMpsPeers(const WorkerSlot& failed) {
  const std::string& device = failed.instance().device;
  if (!mps_.ShouldRecycleDevice(device)) return;
  const std::string why = "MPS server of " + device + " recovering from a fault in worker " +
                          std::to_string(failed.id());
  for (auto& slot : workers_) {
    if (slot.get() == &failed || slot->pid() <= 0 || slot->instance().device != device ||
        slot->device() == "cpu") {
      continue;
    }
    TF_LOG(kWarn) << "recycling MPS client" << Kv("worker", slot->id()) << Kv("why", why);
    slot->RecycleForMps(why);
  }
}

void Supervisor::FailModelIfNoWorkers(Model& model) {
  if (ModelAvailable(model)) return;
  std::string reason;
  for (size_t i : model.slots) {
    if (!workers_[i]->failure_reason().empty()) reason = workers_[i]->failure_reason();
  }
  Status status = Unavailable("model '" + model.config.name + "' has no live worker: " +
                              (reason.empty() ? "all workers failed" : reason));
  for (auto& r : model.queue.TakeAll()) {
    dispatcher_.Fail(model, r, status);
  }
}

bool Supervisor::ModelAvailable(const Model& model) const {
  // A restarting worker serves again soon: its model's requests wait for it (up to their
  // deadline or max_queue_wait_ms). Only failed or stopped workers cannot.
  auto may_serve = [&](size_t i) { return workers_[i]->MayServeSoon(); };
  if (std::any_of(model.slots.begin(), model.slots.end(), may_serve)) return true;
  // A spare serves only in the place of a serving slot (spare_policy.h), and not during a
  // rollout: without such a place it cannot help, and requests must not wait for it.
  const bool has_place = std::any_of(model.slots.begin(), model.slots.end(),
                                     [&](size_t i) { return !workers_[i]->retiring(); });
  return has_place && model.rollout.state != RolloutState::kRolling &&
         std::any_of(model.spares.begin(), model.spares.end(), may_serve);
}

void Supervisor::HandleControl() {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(control_, &frames); ++n) {
    if (frames.size() != 2) continue;
    std::string routing = frames[0].to_string();
    WorkerSlot* slot = workers_.FindByRoutingId(routing);
    json message = json::parse(frames[1].to_string_view(), nullptr, false);
    if (!slot || !message.is_object()) {
      TF_LOG(kDebug) << "control message from an unknown or stale worker dropped" << Kv("from", routing);
      continue;
    }
    try {
      OnControlMessage(*slot, routing, message);
    } catch (const json::exception& e) {
      // A field of the wrong type (json::value throws): drop the message, keep the worker.
      TF_LOG(kWarn) << "malformed control message dropped" << Kv("worker", slot->id())
                    << Kv("error", e.what());
    }
  }
}

void Supervisor::OnControlMessage(WorkerSlot& worker, const std::string& routing,
                                  const json& message) {
  WorkerSlot* slot = &worker;
  TimePoint now = clock_.Now();
  slot->OnMessage(now);
  std::string type = message.value("type", "");
  if (type == ipc::kMsgHeartbeat) {
    control_.send(zmq::buffer(routing), zmq::send_flags::sndmore);
    control_.send(zmq::str_buffer(R"({"type":"ack"})"), zmq::send_flags::none);
    ReadTelemetry(message, &slot->telemetry);
  } else if (type == ipc::kMsgHello) {
    slot->OnHello(now);
    int version = message.value("layout_version", 0);
    if (version != static_cast<int>(ipc::kLayoutVersion)) {
      TF_LOG(kError) << "worker speaks another shared-memory layout; killing it"
                     << Kv("worker", slot->id()) << Kv("worker_layout", version)
                     << Kv("supervisor_layout", ipc::kLayoutVersion);
      ::kill(slot->pid(), SIGKILL);
    } else if (slot->state() == SlotState::kStopping) {
      // Asked to stop before it could hear it (ROUTER drops messages to a peer not connected
      // yet): say it again now, instead of waiting kStopGrace to SIGKILL it.
      SendStop(*slot);
    }
  } else if (type == ipc::kMsgReady) {
    slot->telemetry.precision = message.value("precision", "fp32");
    slot->telemetry.warmup_ms = message.value("warmup_ms", 0.0);
    if (std::vector<TensorSpec> outputs; ipc::ReadyOutputsFromMessage(message, &outputs)) {
      LearnOutputs(&models_[slot->model_index()], outputs);
    }
    slot->OnReady(now, message.value("load_ms", 0.0), message.value("warmup_ms", -1.0));
    PromoteSpares(models_[slot->model_index()], std::nullopt);
  } else if (type == ipc::kMsgError) {
    std::string reason = message.value("message", "unknown error");
    TF_LOG(kError) << "worker reported an error" << Kv("worker", slot->id())
                   << Kv("model", slot->model_name()) << Kv("error", reason);
    if (message.value("fatal", false)) {
      slot->OnFatalError(reason, message.value("kind", "internal"), now);
    }
  }
}

void Supervisor::SendStop(const WorkerSlot& slot) {
  control_.send(zmq::buffer(ipc::WorkerRoutingId(slot.id(), slot.generation())),
                zmq::send_flags::sndmore);
  control_.send(zmq::str_buffer(R"({"type":"stop"})"), zmq::send_flags::none);
}

}  // namespace torchfarm
