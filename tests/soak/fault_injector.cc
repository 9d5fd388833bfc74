#include "fault_injector.h"

#include <signal.h>

#include <algorithm>
#include <sstream>

#include "common/protocol.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {

using nlohmann::json;
using Ms = std::chrono::milliseconds;

FaultInjector::FaultInjector(Farm& farm, const RoundConfig& config,
                             const std::vector<std::unique_ptr<SoakClient>>& clients,
                             RoundLedger& ledger)
    : farm_(farm), config_(config), clients_(clients), ledger_(ledger), rng_(config.seed) {}

FaultInjector::~FaultInjector() {
  close_non_reading_ = true;
  for (auto& t : non_reading_) t.join();
}

bool FaultInjector::Run(Clock::time_point end) {
  bool alive = true;
  for (;;) {
    SleepUntil(std::min(end, Clock::now() + Ms(Uniform(rng_, 200, 1500))));
    if (!farm_.Running()) {
      ledger_.Fail("the supervisor died: " + farm_.error());
      alive = false;
      break;
    }
    if (Clock::now() >= end) break;
    const int draw = Uniform(rng_, 0, 99);
    if (draw < 30) {
      KillOne();
    } else if (draw < 50) {
      StopOne();
    } else if (draw < 62) {
      StartNonReadingClient();
    } else if (draw < 80) {
      Burst();
    } else if (draw < 88) {
      KillStorm(end);
    } else if (draw < 93) {
      KillZygote();
    }  // else: a quiet step
  }
  ResumeStopped(/*all=*/true);
  close_non_reading_ = true;
  for (auto& t : non_reading_) t.join();
  non_reading_.clear();
  ledger_.Note("faults stop");
  return alive;
}

std::string FaultInjector::Summary() const {
  std::ostringstream out;
  out << "kills=" << kills_ << " stops=" << stops_ << " kill_storms=" << storms_
      << " non_reading_clients=" << non_reading_clients_ << " bursts=" << bursts_
      << " zygote_kills=" << zygote_kills_;
  return out.str();
}

std::vector<FaultInjector::Worker> FaultInjector::Workers() const {
  std::vector<Worker> workers;
  json stats = farm_.Admin("stats", 2'000);
  if (!stats.is_object() || !stats.contains("workers")) return workers;
  for (const auto& w : stats["workers"]) {
    workers.push_back({w.value("id", -1), w.value("pid", pid_t{-1}), w.value("state", "")});
  }
  return workers;
}

bool FaultInjector::Pick(int slot, Worker* out) {
  std::vector<Worker> candidates;
  for (const Worker& w : Workers()) {
    bool stopped = std::any_of(stopped_.begin(), stopped_.end(),
                               [&](const Stopped& s) { return s.pid == w.pid; });
    if (w.pid > 0 && !stopped && restart_faults_[w.id] < kMaxRestartsPerSlot &&
        (slot < 0 || w.id == slot)) {
      candidates.push_back(w);
    }
  }
  if (candidates.empty()) return false;
  *out = candidates[Uniform(rng_, 0, static_cast<int>(candidates.size()) - 1)];
  return true;
}

void FaultInjector::Kill(const Worker& worker, const std::string& why) {
  if (::kill(worker.pid, SIGKILL) != 0) return;  // already gone
  ++kills_;
  ++restart_faults_[worker.id];
  ledger_.Note("SIGKILL worker " + std::to_string(worker.id) + " pid " +
               std::to_string(worker.pid) + " (" + worker.state + ")" + why);
}

void FaultInjector::KillOne() {
  Worker worker;
  if (Pick(-1, &worker)) Kill(worker, "");
}

// SIGKILLs one of the worker zygotes (supervisor/workers/zygote_pool.h): workers launched meanwhile
// fork from the other one; never a restart of a worker slot, so no budget is counted.
void FaultInjector::KillZygote() {
  const json stats = farm_.Admin("stats", 2'000);
  if (!stats.is_object()) return;
  std::vector<pid_t> pids;
  for (const auto& place : stats["supervisor"]["zygote"].value("zygotes", json::array())) {
    const pid_t pid = place.value("pid", -1);
    if (pid > 0) pids.push_back(pid);
  }
  if (pids.empty()) return;
  const pid_t pid = pids[static_cast<size_t>(Uniform(rng_, 0, static_cast<int>(pids.size()) - 1))];
  if (::kill(pid, SIGKILL) != 0) return;
  ++zygote_kills_;
  ledger_.Note("SIGKILL zygote pid " + std::to_string(pid));
}

void FaultInjector::StopOne() {
  Worker worker;
  if (!Pick(-1, &worker) || ::kill(worker.pid, SIGSTOP) != 0) return;
  const int stop_ms = Uniform(rng_, 200, 4000);
  ++stops_;
  if (stop_ms >= kStopThatMayRestartMs) ++restart_faults_[worker.id];
  stopped_.push_back({worker.pid, Clock::now() + Ms(stop_ms)});
  ledger_.Note("SIGSTOP worker " + std::to_string(worker.id) + " pid " +
               std::to_string(worker.pid) + " (" + worker.state + ") for " +
               std::to_string(stop_ms) + " ms");
}

// The same slot killed again each time its new process is ready: the restart policy's case.
void FaultInjector::KillStorm(Clock::time_point end) {
  Worker target;
  if (!Pick(-1, &target)) return;
  const int kills = Uniform(rng_, 3, kMaxRestartsPerSlot);
  ++storms_;
  ledger_.Note("kill storm on worker " + std::to_string(target.id) + ": up to " +
               std::to_string(kills) + " kills, each once it is ready again");
  pid_t last = -1;
  for (int n = 0; n < kills && Clock::now() < end; ++n) {
    Worker worker;
    bool ready = false;
    while (!ready && Clock::now() < end) {
      ready = Pick(target.id, &worker) && worker.pid != last &&
              (worker.state == "ready" || worker.state == "busy");
      if (!ready) SleepUntil(Clock::now() + Ms(50));
    }
    if (!ready) break;
    Kill(worker, " [storm " + std::to_string(n + 1) + "/" + std::to_string(kills) + "]");
    last = worker.pid;
  }
}

// Sends, stops reading, and closes its socket with replies owed: at once, or after holding the
// socket open for up to 3 s (long enough for the supervisor's 2 s stalled-reader rule, which
// applies to replies of 128 KiB and more: 32 rows of 1024 floats, 16 of 2048).
void FaultInjector::StartNonReadingClient() {
  const int requests = Uniform(rng_, 10, 100);
  const int64_t rows = Uniform(rng_, 1, 32);
  const int hold_ms = Chance(rng_, 50) ? 0 : Uniform(rng_, 500, 3000);
  const int64_t columns = config_.models[0].columns;
  ++non_reading_clients_;
  ledger_.Note("non-reading client: " + std::to_string(requests) + " identity requests of " +
               std::to_string(rows) + " rows, closes after " + std::to_string(hold_ms) + " ms");
  non_reading_.emplace_back([this, requests, rows, hold_ms, columns, endpoint = farm_.endpoint()] {
    Client client(endpoint, 2'000);
    std::string data(static_cast<size_t>(rows * columns) * sizeof(float), '\x3f');
    for (int n = 1; n <= requests; ++n) {
      json header = {{"v", kProtocolVersion}, {"id", n}, {"model", "identity"},
                     {"inputs", json::array({{{"dtype", "float32"}, {"shape", {rows, columns}}}})}};
      if (!client.SendRaw({header.dump(), data}).ok()) break;
    }
    auto until = Clock::now() + Ms(hold_ms);
    while (Clock::now() < until && !close_non_reading_) std::this_thread::sleep_for(Ms(20));
  });  // ~Client closes the socket (linger 0) with the replies unread
}

void FaultInjector::Burst() {
  if (clients_.empty()) return;
  const int client = Uniform(rng_, 0, static_cast<int>(clients_.size()) - 1);
  const int requests = Uniform(rng_, 20, 120);
  ++bursts_;
  clients_[client]->AddBurst(requests);
  ledger_.Note("burst of " + std::to_string(requests) + " requests from client " +
               std::to_string(client));
}

void FaultInjector::SleepUntil(Clock::time_point until) {
  for (;;) {
    ResumeStopped(/*all=*/false);
    auto now = Clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, Ms(10)));
  }
}

void FaultInjector::ResumeStopped(bool all) {
  auto now = Clock::now();
  for (auto it = stopped_.begin(); it != stopped_.end();) {
    if (all || now >= it->resume_at) {
      ::kill(it->pid, SIGCONT);
      ledger_.Note("SIGCONT pid " + std::to_string(it->pid));
      it = stopped_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace torchfarm::testing
