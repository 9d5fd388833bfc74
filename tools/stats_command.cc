#include "tools/stats_command.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <thread>

#include "common/integer_flag.h"
#include "tools/stats_table.h"

namespace torchfarm {

using nlohmann::json;

namespace {

std::string LocalTimestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

}  // namespace

StatsCommand::StatsCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("stats", "Print the farm's models and workers as tables");
  app_->add_option("--admin", admin_, "Admin endpoint of the supervisor")->capture_default_str();
  app_->add_flag("--json", json_, "Print the raw stats reply as pretty JSON");
  app_->add_option("--watch", watch_seconds_, "Print again every SECONDS until interrupted")
      ->check(CLI::Range(0.001, 86'400.0));
  app_->add_option("--timeout-ms", timeout_ms_, "How long to wait for the supervisor's answer")
      ->check(IntegerIn(1, kMaxAdminTimeoutMs))
      ->capture_default_str();
}

int StatsCommand::PrintOnce(AdminClient* client) const {
  json stats;
  Status s = client->Command("stats", &stats);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTransport;
  }
  if (std::string error = AdminReplyError(stats); !error.empty()) {
    std::cerr << "error: " << error << "\n";
    return kExitServerError;
  }
  if (json_) {
    std::cout << stats.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
    return kExitOk;
  }
  for (const auto& line : RenderStatsTable(stats)) std::cout << line << "\n";
  std::cout << std::flush;
  return kExitOk;
}

int StatsCommand::Run() {
  AdminClient client(admin_, timeout_ms_);
  if (watch_seconds_ <= 0) return PrintOnce(&client);
  auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(watch_seconds_));
  auto next = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    // JSON snapshots stay one valid document each (no banner) so `jq` can read the stream.
    if (!json_) std::cout << (first ? "" : "\n") << "=== " << LocalTimestamp() << " ===\n";
    int code = PrintOnce(&client);
    // A bad endpoint will not get better; a missing answer may (the supervisor restarting).
    if (code == kExitUsage) return code;
    next += period;
    std::this_thread::sleep_until(next);
  }
}

}  // namespace torchfarm
