#include "supervisor/events/worker_events.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "supervisor/dispatch/model_metadata.h"
#include "supervisor/loop/duty_barrier.h"
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

// The event ring's sentence for a worker's exit: its cause, the batches it held, what comes next.
std::string ExitEventText(const WorkerSlot& slot, pid_t pid, size_t orphans, bool expected,
                          TimePoint now) {
  std::string text = "worker " + std::to_string(slot.id()) + " pid " + std::to_string(pid) +
                     " exited: " + slot.last_exit();
  if (orphans > 0) text += "; " + std::to_string(orphans) + " batch(es) in flight served again";
  if (slot.state() == SlotState::kBackoff) {
    const int64_t ms = std::max<int64_t>(0, ToMicros(slot.restart_at() - now) / 1000);
    text += "; restarting in " + std::to_string(ms) + " ms";
  } else if (slot.state() == SlotState::kFailed) {
    text += "; failed: " + slot.failure_reason();
  } else if (expected) {
    text += " (asked to stop)";
  }
  return text;
}

}  // namespace

void FailIfNoWorkers(const ModelTable& models, Dispatcher& dispatcher, ServedModel& model) {
  if (models.Available(model)) return;
  const std::string reason = models.Tally(model).failure_reason;
  const Status status = Unavailable("model '" + model.config.name + "' has no live worker: " +
                                    (reason.empty() ? "all workers failed" : reason));
  for (auto& r : model.queue.TakeAll()) dispatcher.Fail(model, *r, status);
}

void WorkerEvents::OnOutput(WorkerSlot& slot) {
  slot.ReadOutput([&](const std::string& line) {
    if (line.rfind("ts=", 0) == 0) {
      // Already a logfmt line with the worker's id, pid and model: pass it through whole.
      std::string out = line + "\n";
      ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
      (void)ignored;
    } else if (!line.empty()) {
      TF_LOG(kInfo) << line << Kv("worker", slot.id()) << Kv("worker_pid", slot.pid())
                    << Kv("model", slot.model_name()) << Kv("stream", "output");
    }
  });
}

void WorkerEvents::SendDueStops() {
  const TimePoint now = d_.clock.Now();
  for (auto& slot : d_.workers) {
    if (slot->TakeStopRequest(now)) SendStop(*slot);
  }
}

void WorkerEvents::OnChildExit(pid_t pid, int wait_status, TimePoint death) {
  if (d_.zygotes.OnExit(pid, wait_status, d_.clock.Now())) return;
  WorkerSlot* slot = d_.workers.FindByPid(pid);
  if (!slot) return;  // not a worker (an MPS control helper, a stale pid)
  bool expected = IsStoppingWorkers(d_.farm.phase) || slot->state() == SlotState::kStopping;
  OnOutput(*slot);  // what it printed last (a crash message) comes first
  slot->MarkReaped();  // a violation found in its ring now must not signal a reused pid
  // Batches it finished before it died are answered, not re-run: only what is left in the ring
  // was running or waiting when it died.
  RunGuarded("responses of an exited worker", d_.clock, [&] { d_.responses.Collect(*slot); });
  const int running = slot->running_batches();
  auto orphans = slot->OnExit(wait_status, d_.clock.Now(), d_.workers.policy(),
                              IsStoppingWorkers(d_.farm.phase));
  // Before the orphans go back to the queue: a ready spare takes the dead worker's place, so the
  // loop's next dispatch sends them to it (a graceful restart's slot is starting again too).
  d_.spares.Promote(d_.models[slot->model_index()], death);
  TF_LOG_AT(expected ? LogLevel::kInfo : LogLevel::kWarn) << "worker exited" << Kv("worker", slot->id())
                                   << Kv("pid", pid) << Kv("model", slot->model_name())
                                   << Kv("cause", slot->last_exit())
                                   << Kv("inflight_batches", orphans.size());
  // The oldest batches were running (one on a CPU, one per stream on a GPU); the ones behind
  // them in the ring never started. Requeue in reverse so the queue keeps their order.
  for (size_t i = orphans.size(); i-- > 0;) {
    if (IsStoppingWorkers(d_.farm.phase)) {
      // The farm is stopping: nothing will run these again.
      for (auto& r : orphans[i].requests) {
        d_.dispatcher.Fail(d_.models[slot->model_index()], *r,
                           Unavailable("the farm shut down before this request could finish"));
      }
      continue;
    }
    d_.dispatcher.Requeue(orphans[i], slot->model_index(), slot->last_exit(),
                          i < static_cast<size_t>(running));
  }
  if (events_)
    events_->Add("exit", ExitEventText(*slot, pid, orphans.size(), expected, d_.clock.Now()),
                 slot->model_name(), slot->id());
  if (metrics_ && slot->state() == SlotState::kBackoff && !expected) {
    metrics_->WorkerRestart(slot->model_name(), slot->model_version());
  }
  if (slot->last_exit_was_protocol_violation()) {
    d_.workers.CountProtocolViolation();
    if (metrics_) metrics_->WorkerProtocolViolation(slot->model_name(), slot->model_version());
  }
  if (!expected && slot->last_exit_was_device_failure()) RecycleMpsPeers(*slot);
  FailIfNoWorkers(d_.models, d_.dispatcher, d_.models[slot->model_index()]);
}

void WorkerEvents::RecycleMpsPeers(const WorkerSlot& failed) {
  const std::string& device = failed.instance().device;
  if (!d_.mps.ShouldRecycleDevice(device)) return;
  const std::string why = "MPS server of " + device + " recovering from a fault in worker " +
                          std::to_string(failed.id());
  for (auto& slot : d_.workers) {
    if (slot.get() == &failed || slot->pid() <= 0 || slot->instance().device != device ||
        slot->device() == "cpu") {
      continue;
    }
    TF_LOG(kWarn) << "recycling MPS client" << Kv("worker", slot->id()) << Kv("why", why);
    slot->RecycleForMps(why);
  }
}

void WorkerEvents::OnControl() {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(d_.control, &frames); ++n) {
    if (frames.size() != 2) continue;
    std::string routing = frames[0].to_string();
    WorkerSlot* slot = d_.workers.FindByRoutingId(routing);
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

void WorkerEvents::OnControlMessage(WorkerSlot& worker, const std::string& routing,
                                    const json& message) {
  WorkerSlot* slot = &worker;
  TimePoint now = d_.clock.Now();
  slot->OnMessage(now);
  std::string type = message.value("type", "");
  if (type == ipc::kMsgHeartbeat) {
    ++control_sends_;
    d_.control.send(zmq::buffer(routing), zmq::send_flags::sndmore);
    d_.control.send(zmq::str_buffer(R"({"type":"ack"})"), zmq::send_flags::none);
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
      LearnOutputs(&d_.models[slot->model_index()], outputs);
    }
    slot->OnReady(now, message.value("load_ms", 0.0), message.value("warmup_ms", -1.0));
    d_.spares.Promote(d_.models[slot->model_index()], std::nullopt);
  } else if (type == ipc::kMsgError) {
    std::string reason = message.value("message", "unknown error");
    TF_LOG(kError) << "worker reported an error" << Kv("worker", slot->id())
                   << Kv("model", slot->model_name()) << Kv("error", reason);
    if (message.value("fatal", false)) {
      slot->OnFatalError(reason, message.value("kind", "internal"), now);
    }
  }
}

void WorkerEvents::SendStop(const WorkerSlot& slot) {
  ++control_sends_;
  d_.control.send(zmq::buffer(ipc::WorkerRoutingId(slot.id(), slot.generation())),
                  zmq::send_flags::sndmore);
  d_.control.send(zmq::str_buffer(R"({"type":"stop"})"), zmq::send_flags::none);
}

}  // namespace torchfarm
