// Test support: runs the real torchfarm-supervisor binary on a config written for the test, waits
// for readiness through its admin socket, and stops it with SIGTERM, the way an operator would.
//
// Owns: a scratch folder (config, run_dir, ipc sockets) removed on destruction, and the
// supervisor's pid (SIGKILLed if still alive on destruction; then the /dev/shm segments of dead
// supervisors are removed with the supervisor's own RemoveStaleFiles). When the running test failed
// during the Farm's life, the destructor prints the supervisor's log.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace torchfarm::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

// Folder holding models written once per test binary by torchfarm-mkmodel --all.
const std::string& ModelDir();
std::string BinDir();

// Runs another supervisor on `config_path` until it exits (a start that is refused); returns its
// exit code (-signal if killed, -1000 if still running after timeout_ms, then SIGKILLed) and what
// it logged in *log.
int RunSupervisorToExit(const std::string& config_path, std::string* log, int timeout_ms = 20'000);

// One "models[]" entry: float32 input of `shape` (e.g. [-1, 64]) served by `workers` CPU workers;
// `extra` keys (max_batch_size, ...) are added or replace the ones written here.
nlohmann::json ModelEntry(const std::string& name, const std::string& file, nlohmann::json shape,
                          int workers, nlohmann::json extra = nlohmann::json::object());

// GET http://127.0.0.1:PORT/PATH over HTTP/1.0: the whole response (status line, headers, body),
// or "" when it cannot be read.
std::string HttpGet(int port, const std::string& path);
// The value of the Prometheus series named exactly `series` (with its labels) in `text`, or -1.
double MetricValue(const std::string& text, const std::string& series);

class Farm {
 public:
  // `models` is the "models" array of the config; endpoint and run_dir are filled in, and
  // heartbeat_ms is 200 unless `extra` says otherwise. An `extra` key whose value is null is
  // left out of the config, so a test can run on the documented default ({"heartbeat_ms": null}).
  explicit Farm(nlohmann::json models, nlohmann::json extra = nlohmann::json::object());
  ~Farm();

  // Rewrites the config file's "models" (and extra keys) for a reload.
  void RewriteConfig(nlohmann::json models, nlohmann::json extra = nlohmann::json::object());
  // Starts the supervisor with `env` ("NAME=value") added to its environment.
  bool Start(const std::vector<std::string>& extra_args = {},
             const std::vector<std::string>& env = {});
  // Waits until every model has `min_ready` ready workers (-1: all of its workers), or false
  // after timeout_ms.
  bool WaitReady(int min_ready = -1, int timeout_ms = 60'000);
  // Sends {"cmd": cmd} to the admin socket; null on timeout.
  nlohmann::json Admin(const std::string& cmd, int timeout_ms = 5'000) const;
  // Sends a whole admin request ({"cmd": "load", "model": ...}); null on timeout.
  nlohmann::json AdminRequest(const nlohmann::json& request, int timeout_ms = 5'000) const;
  // SIGTERM, then waits up to timeout_ms; returns the exit code (or -signal, or -1000 on timeout).
  int Stop(int timeout_ms = 30'000);
  // True while the supervisor runs; once it has exited it is reaped, error() says how it ended
  // ("supervisor exited with status 0", "supervisor killed by signal 11") and this stays false.
  bool Running();
  // The next Start runs the supervisor as under `prlimit --nofile=N` (soft and hard limit).
  void set_descriptor_limit(int limit) { descriptor_limit_ = limit; }
  // Worker pids from the stats reply, in worker-id order (-1 for slots without a process).
  std::vector<pid_t> WorkerPids() const;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  pid_t pid() const { return pid_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  std::string endpoint_;
  std::string admin_;
  std::string config_path_;
  nlohmann::json base_config_;
  pid_t pid_ = -1;
  std::string error_;
  int failures_at_start_ = 0;
  int descriptor_limit_ = 0;  // > 0: RLIMIT_NOFILE of the next Start  // failed parts of the running test when this Farm was made
};

}  // namespace torchfarm::testing
