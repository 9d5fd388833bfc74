#include "tools/ctl_command.h"

#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "common/integer_flag.h"
#include "common/worker_count.h"
#include "tools/stats_fields.h"
#include "tools/stats_table.h"

namespace torchfarm {

using nlohmann::json;

CtlCommand::CtlCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("ctl",
                                "Check or steer a running farm: health, drain, reload, "
                                "restart, scale, models, load, unload");
  app_->require_subcommand(1);
  // Lets the shared flags come after the action too: `torchfarm ctl health --admin EP`.
  app_->fallthrough();
  app_->add_option("--admin", admin_, "Admin endpoint of the supervisor")->capture_default_str();
  app_->add_option("--timeout-ms", timeout_ms_, "How long to wait for the supervisor's answer")
      ->check(IntegerIn(1, kMaxAdminTimeoutMs))
      ->capture_default_str();
  app_->add_flag("--json", json_, "Print the raw reply as pretty JSON");

  health_ = app_->add_subcommand(
      "health", "Liveness and readiness per model; exit 0 ready, 1 not ready, 3 no answer");
  drain_ = app_->add_subcommand("drain", "Stop taking new jobs and let the queued ones finish");
  reload_ = app_->add_subcommand(
      "reload",
      "Re-read the config file and apply it; waits for the rolling replacements it starts "
      "(exit 1 when one fails and is rolled back)");
  reload_->add_flag("--no-wait", no_wait_,
                    "Return once the supervisor accepted the reload, without waiting for the "
                    "rollouts");
  restart_ = app_->add_subcommand("restart", "Restart one worker (its jobs are served again)");
  restart_->add_option("worker", worker_, "Worker id (the ID column of `torchfarm stats`)")
      ->required()
      ->check(IntegerIn(0, INT32_MAX));
  scale_ = app_->add_subcommand("scale", "Set the number of workers of a model");
  scale_->add_option("model", model_, "Model name")->required();
  scale_->add_option("count", count_, "Number of workers (the bound of a model's count)")
      ->required()
      ->check(IntegerIn(0, kMaxWorkersPerModel));
  models_ = app_->add_subcommand(
      "models", "Every model with its state, ready/total workers, queue depth and last rollout");
  load_ = app_->add_subcommand(
      "load",
      "Load a model at run time (the config file's entry NAME, or --config-json) and wait until "
      "it is available; the config file is not changed, the next reload follows the file");
  load_->add_option("model", model_, "Model name")->required();
  load_->add_option("--config-json", config_json_,
                    "The model entry itself, as in the config file's models[] (relative paths "
                    "resolve against the config file's folder)");
  load_->add_flag("--no-wait", no_wait_, "Return once the supervisor started the workers");
  unload_ = app_->add_subcommand(
      "unload",
      "Unload a model: new requests get NOT_FOUND, queued and running ones finish, then its "
      "workers stop; waits until they are gone");
  unload_->add_option("model", model_, "Model name")->required();
  unload_->add_flag("--no-wait", no_wait_, "Return once the supervisor began the unload");
}

json CtlCommand::Request() const {
  if (health_->parsed()) return {{"cmd", "health"}};
  if (drain_->parsed()) return {{"cmd", "drain"}};
  if (reload_->parsed()) return {{"cmd", "reload"}};
  if (restart_->parsed()) return {{"cmd", "restart"}, {"worker", worker_}};
  if (models_->parsed()) return {{"cmd", "models"}};
  if (unload_->parsed()) return {{"cmd", "unload"}, {"model", model_}};
  if (load_->parsed()) {
    json request = {{"cmd", "load"}, {"model", model_}};
    if (!config_json_.empty()) request["config"] = json::parse(config_json_, nullptr, false);
    return request;
  }
  return {{"cmd", "scale"}, {"model", model_}, {"count", count_}};
}

int CtlCommand::RunHealth(const json& reply) const {
  if (!json_) {
    for (const auto& line : RenderHealthTable(reply)) std::cout << line << "\n";
  }
  const json* ready = FindField(reply, {"ready"});
  if (ready == nullptr || !ready->is_boolean()) {
    std::cerr << "error: the health reply has no boolean \"ready\"\n";
    return kExitServerError;
  }
  return ready->get<bool>() ? kExitOk : kExitServerError;
}

int CtlCommand::RunAction(const json& reply) const {
  if (std::string error = AdminReplyError(reply); !error.empty()) {
    std::cerr << "error: " << error << "\n";
    return kExitServerError;
  }
  std::string message = TextField(reply, {"message"});
  if (!json_) std::cout << (message == kMissing ? "ok" : message) << "\n";
  return kExitOk;
}

int CtlCommand::WaitForRollouts(AdminClient& client, const json& rollouts) const {
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(WaitBoundMs());
  std::map<std::string, uint64_t> waiting;  // model -> rollout id
  for (const auto& r : rollouts) waiting[r.value("model", "")] = r.value("id", uint64_t{0});
  int exit_code = kExitOk;
  json last;
  while (!waiting.empty()) {
    json stats;
    if (client.Command("stats", &stats).ok()) last = stats;
    for (const auto& m : last.value("models", json::array())) {
      auto it = waiting.find(m.value("name", ""));
      if (it == waiting.end() || !m.contains("rollout")) continue;
      const json& r = m["rollout"];
      if (r.value("id", uint64_t{0}) != it->second) continue;
      const std::string state = r.value("state", "");
      if (state == "rolling") continue;
      const std::string progress = std::to_string(r.value("replaced", 0)) + "/" +
                                   std::to_string(r.value("total", 0)) + " replaced in " +
                                   std::to_string(r.value("finished_ms", int64_t{0}) -
                                                  r.value("started_ms", int64_t{0})) + " ms";
      if (state == "done") {
        if (!json_) std::cout << "rollout " << it->second << " of " << it->first << ": done, " << progress << "\n";
      } else {
        std::cerr << "rollout " << it->second << " of " << it->first << ": " << state << ", "
                  << progress << ", rolled back; the old workers keep serving: "
                  << r.value("reason", "") << "\n";
        exit_code = kExitServerError;
      }
      waiting.erase(it);
    }
    if (waiting.empty()) break;
    if (Steady::now() >= deadline) {
      for (const auto& [model, id] : waiting) {
        std::cerr << "rollout " << id << " of " << model
                  << ": still rolling when the wait ran out (see torchfarm stats)\n";
      }
      return kExitServerError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return exit_code;
}

int CtlCommand::Run() {
  AdminClient client(admin_, timeout_ms_);
  json reply;
  if (load_->parsed() && !config_json_.empty() &&
      json::parse(config_json_, nullptr, false).is_discarded()) {
    std::cerr << "error: --config-json: expected a JSON object (a models[] entry), got "
              << config_json_ << "\n";
    return kExitUsage;
  }
  Status s = client.Call(Request(), &reply);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTransport;
  }
  if (json_) std::cout << reply.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
  if (health_->parsed()) return RunHealth(reply);
  if (models_->parsed()) return RunModels(reply);
  const int code = RunAction(reply);
  if (code == kExitOk && !no_wait_ && load_->parsed()) return WaitForLoad(client);
  if (code == kExitOk && !no_wait_ && unload_->parsed()) return WaitForUnload(client);
  const json rollouts = reply.value("rollouts", json::array());
  if (code != kExitOk || !reload_->parsed() || no_wait_ || rollouts.empty()) return code;
  return WaitForRollouts(client, rollouts);
}

}  // namespace torchfarm
