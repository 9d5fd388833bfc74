// The farm as the operator sees it, in JSON at the edge: what the admin socket's `health`,
// `stats` and `models` commands answer, the front ends' health and model metadata ("meta"), and
// the typed results of model control (ScaleResult, LoadResult, ...) turned into admin replies.
// The domain never reads this JSON back.
//
// Reads the farm's collaborators; owns only the previous CPU samples of each process (for
// cpu_percent between two stats calls). Loop thread only.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/model_stats.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/dispatch/response_handler.h"
#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/loop/event_ring.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/models/model_control.h"
#include "supervisor/models/model_table.h"
#include "supervisor/security/resource_limits.h"
#include "supervisor/workers/mps_controller.h"
#include "supervisor/workers/worker_pool.h"
#include "supervisor/workers/zygote_pool.h"

namespace torchfarm {

// A model's lifetime counters for the v2 statistics extension (FarmStatus::FrontendMeta).
nlohmann::json StatisticsJson(const ModelStats::Totals& totals, TimePoint now);

// `text` with every absolute filesystem path replaced by ".../" and its last component (what the
// dashboard shows of exit causes and reasons: a client of the HTTP endpoint learns no paths).
std::string RedactPaths(const std::string& text);

class FarmStatus {
 public:
  struct Sources {
    const FarmConfig& config;
    const ModelTable& models;
    const WorkerPool& workers;
    const Dispatcher& dispatcher;
    const ReplyWriter& replies;
    const ResponseHandler& responses;
    const ZygotePool& zygotes;
    const MpsController& mps;
    const FarmState& farm;
    const ResourceLimits& limits;
    const TimeSource& clock;
  };
  explicit FarmStatus(Sources sources) : s_(sources) {}
  void set_started(TimePoint started) { started_ = started; }
  void set_client_shm(const ClientShmRegistry* registry) { client_shm_ = registry; }
  void set_events(const EventRing* events) { events_ = events; }

  // Liveness, readiness (every model has a ready worker and the farm is not draining), per model.
  nlohmann::json Health() const;
  // Supervisor, models, workers, zygotes, replies, client regions and resources.
  nlohmann::json Stats();
  nlohmann::json Models() const;
  // Health plus each served (name, version)'s metadata (model_metadata.h) and "default"; with
  // `statistics`, each entry's lifetime counters too (StatisticsJson).
  nlohmann::json FrontendMeta(bool statistics = false) const;
  nlohmann::json Resources() const;
  // The live dashboard's status (GET /v2/torchfarm/stats, docs/operations.md "Dashboard"): the
  // farm, each model and each worker as `stats` has them, less what an HTTP client should not
  // see (no file paths, no keys, no config), and the events after `events_after` (newest first,
  // at most kDashboardEvents). Models and workers are rebuilt at most every kDashboardReuse: five
  // open dashboards cost the loop one build a refresh, not five.
  nlohmann::json Dashboard(uint64_t events_after = 0);
  static constexpr size_t kDashboardEvents = 100;
  static constexpr Clock::duration kDashboardReuse = std::chrono::milliseconds(250);

 private:
  nlohmann::json Worker(const WorkerSlot& slot, TimePoint now);
  nlohmann::json DashboardBody(TimePoint now);
  void ForgetGoneSamples();

  Sources s_;
  TimePoint started_{};
  const ClientShmRegistry* client_shm_ = nullptr;
  std::map<pid_t, ProcessSample> samples_;
  const EventRing* events_ = nullptr;
  nlohmann::json dashboard_;  // the last DashboardBody
  TimePoint dashboard_at_{};
  std::optional<ProcessSample> self_sample_;  // the supervisor's CPU between two dashboards
};

nlohmann::json RolloutJson(const std::string& model, const ModelRollout& rollout);
// Admin replies from model control's typed results.
nlohmann::json ScaleReply(const ScaleResult& result);
nlohmann::json LoadReply(const LoadResult& result);
nlohmann::json UnloadReply(const UnloadResult& result);
// The admin `load` request: {"model": NAME} takes the config file's entries named NAME,
// {"model", "config": {...}} that entry (relative paths against the config file's folder).
Status ParseLoadRequest(const nlohmann::json& request, const std::string& config_file,
                        std::vector<ModelConfig>* configs);

}  // namespace torchfarm
