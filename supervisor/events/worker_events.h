// What workers say and do, as the loop hears it: their control messages (hello, ready,
// heartbeat, error) on the control socket, their output pipes (passed to the log), their exits
// (SIGCHLD: finished batches answered, the rest requeued or failed, a spare promoted, MPS peers
// recycled after a device fault) and the stop messages the farm sends them.
//
// Owns nothing; works on the pool's slots and the models' queues. Loop thread only.
#pragma once

#include <sys/types.h>

#include <string>

#include <nlohmann/json_fwd.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/response_handler.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/models/model_table.h"
#include "supervisor/models/spare_manager.h"
#include "supervisor/workers/mps_controller.h"
#include "supervisor/workers/worker_pool.h"
#include "supervisor/workers/zygote_pool.h"

namespace torchfarm {

// Fails every queued request of `model` when none of its workers can serve (all failed or
// stopped): they would wait for nothing.
void FailIfNoWorkers(const ModelTable& models, Dispatcher& dispatcher, ServedModel& model);

class WorkerEvents {
 public:
  struct Deps {
    ModelTable& models;
    WorkerPool& workers;
    Dispatcher& dispatcher;
    ResponseHandler& responses;
    SpareManager& spares;
    ZygotePool& zygotes;
    MpsController& mps;
    zmq::socket_t& control;  // ROUTER; workers' DEALERs carry their routing ids
    const FarmState& farm;
    const TimeSource& clock;
  };
  explicit WorkerEvents(Deps deps) : d_(deps) {}
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }
  // The farm's event ring (the dashboard): every worker exit, with its cause. Null: none.
  void set_events(EventRing* events) { events_ = events; }

  // The control socket is readable: up to kMaxMessagesPerTurn messages.
  void OnControl();
  // A worker's output pipe is readable: its lines go to the log.
  void OnOutput(WorkerSlot& slot);
  // A reaped child. `death`: when the loop learned of it (for the spare hand-over measure).
  void OnChildExit(pid_t pid, int wait_status, TimePoint death);
  // Asks a worker to finish its batches and exit.
  void SendStop(const WorkerSlot& slot);
  // Each turn: workers whose drain finished (retired, restarting) are told to stop.
  void SendDueStops();
  // Messages sent on the control socket since the start: the loop's poller must hear of every
  // use of it (loop_poller.h SocketWatch).
  uint64_t control_sends() const { return control_sends_; }

 private:
  void OnControlMessage(WorkerSlot& slot, const std::string& routing,
                        const nlohmann::json& message);
  void RecycleMpsPeers(const WorkerSlot& failed);

  Deps d_;
  MetricsExporter* metrics_ = nullptr;
  EventRing* events_ = nullptr;
  uint64_t control_sends_ = 0;
};

}  // namespace torchfarm
