// A reading client of the soak test: one thread, one torchfarm::Client (its raw frames, so that a
// second reply to a request is seen instead of dropped as stale), up to `pipeline_depth` requests
// in flight plus the bursts the fault thread asks for. Every reply is checked by value and
// counted by request id; a request still unanswered at the drain deadline is lost.
//
// MlpReference holds mlp outputs computed in this process for a fixed pool of input rows, so a
// reply can be checked without running LibTorch under load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/script.h>

#include "common/protocol.h"
#include "round_ledger.h"
#include "soak_config.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {

class MlpReference {
 public:
  static constexpr int kRows = 64;
  static constexpr int64_t kInputColumns = 256;
  static constexpr int64_t kOutputColumns = 128;

  // Loads ModelDir()/mlp.pt and runs it on each pool row alone.
  MlpReference();
  const float* input(int row) const { return inputs_.data_ptr<float>() + row * kInputColumns; }
  // True when `output` (kOutputColumns floats) is the model's output for pool row `row`, up to the
  // rounding a batched matrix product may change.
  bool Matches(int row, const float* output) const;

 private:
  at::Tensor inputs_;   // [kRows, 256]
  at::Tensor outputs_;  // [kRows, 128]
};

// Set by the round, read by its client threads.
struct RoundControl {
  std::atomic<bool> stop_sending{false};
  // Steady-clock time (nanoseconds since its epoch) after which unanswered requests are lost.
  std::atomic<int64_t> drain_deadline_ns{INT64_MAX};
};

class SoakClient {
 public:
  SoakClient(int index, std::string endpoint, const RoundConfig& config, const MlpReference& mlp,
             RoundControl& control, RoundLedger& ledger);

  // Sends and checks until control.stop_sending, then waits for the replies still owed until
  // the drain deadline, then listens 300 ms more for second replies.
  void Run();
  // Sends `requests` more at once, beyond the pipeline depth (any thread).
  void AddBurst(int requests) { burst_ += requests; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Clock::time_point sent;
    std::string model;
    int64_t rows = 0;
    int64_t timeout_ms = 0;
    int priority = 0;
    std::vector<float> input;    // identity: the expected output
    std::vector<int> pool_rows;  // mlp: MlpReference rows
  };

  void SendOne(Client& client);
  // Receives what arrives within timeout_ms, and then whatever is already there.
  void ReceiveFor(Client& client, int timeout_ms);
  void HandleReply(const std::vector<std::string>& frames);
  void CheckOutputs(uint64_t id, const Pending& request, const ReplyHeader& reply,
                    const std::vector<std::string>& frames);
  void CheckError(uint64_t id, const Pending& request, const ReplyHeader& reply);
  std::string Describe(uint64_t id, const Pending& request) const;

  const int index_;
  const std::string endpoint_;
  const RoundConfig& config_;
  const MlpReference& mlp_;
  RoundControl& control_;
  RoundLedger& ledger_;
  std::mt19937_64 rng_;
  uint64_t next_id_;
  std::atomic<int> burst_{0};
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_set<uint64_t> answered_;
};

}  // namespace torchfarm::testing
