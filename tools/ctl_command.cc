#include "tools/ctl_command.h"

#include <iostream>

#include "tools/stats_fields.h"
#include "tools/stats_table.h"

namespace torchfarm {

using nlohmann::json;

CtlCommand::CtlCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("ctl",
                                "Check or steer a running farm: health, drain, reload, "
                                "restart, scale");
  app_->require_subcommand(1);
  // Lets the shared flags come after the action too: `torchfarm ctl health --admin EP`.
  app_->fallthrough();
  app_->add_option("--admin", admin_, "Admin endpoint of the supervisor")->capture_default_str();
  app_->add_option("--timeout-ms", timeout_ms_, "How long to wait for the supervisor's answer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app_->add_flag("--json", json_, "Print the raw reply as pretty JSON");

  health_ = app_->add_subcommand(
      "health", "Liveness and readiness per model; exit 0 ready, 1 not ready, 3 no answer");
  drain_ = app_->add_subcommand("drain", "Stop taking new jobs and let the queued ones finish");
  reload_ = app_->add_subcommand("reload", "Re-read the config file and apply it");
  restart_ = app_->add_subcommand("restart", "Restart one worker (its jobs are served again)");
  restart_->add_option("worker", worker_, "Worker id (the ID column of `torchfarm stats`)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  scale_ = app_->add_subcommand("scale", "Set the number of workers of a model");
  scale_->add_option("model", model_, "Model name")->required();
  scale_->add_option("count", count_, "Number of workers")
      ->required()
      ->check(CLI::NonNegativeNumber);
}

json CtlCommand::Request() const {
  if (health_->parsed()) return {{"cmd", "health"}};
  if (drain_->parsed()) return {{"cmd", "drain"}};
  if (reload_->parsed()) return {{"cmd", "reload"}};
  if (restart_->parsed()) return {{"cmd", "restart"}, {"worker", worker_}};
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

int CtlCommand::Run() {
  AdminClient client(admin_, timeout_ms_);
  json reply;
  Status s = client.Call(Request(), &reply);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTransport;
  }
  if (json_) std::cout << reply.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
  return health_->parsed() ? RunHealth(reply) : RunAction(reply);
}

}  // namespace torchfarm
