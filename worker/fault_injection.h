// Test-only fault injection, read from the TORCHFARM_FAULT environment variable by the worker, so
// the crash, hang and GPU-failure paths of the farm are exercised on machines without a GPU.
//
//   TORCHFARM_FAULT = item[,item...]
//   item            = KIND@N[/wID]    fire on the N-th batch (1-based) this process runs;
//                                     /wID restricts it to worker slot ID
//                   | fakegpu         serve "cuda:N" devices on the CPU as if they were GPUs
//   KIND            = crash   raise SIGSEGV inside the batch
//                   | hang    never finish the batch (sleep until killed)
//                   | sticky  throw the c10::Error a poisoned CUDA context gives
//                             ("CUDA error: an illegal memory access was encountered")
//                   | oom     throw "CUDA out of memory…" once for the whole batch
//
// Faults fire only in a slot's first process (generation 0), so a restarted worker runs clean and
// a test observes exactly one failure per item. Owns: the parsed plan. Compute thread only.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace torchfarm::worker {

enum class FaultKind { kNone, kCrash, kHang, kSticky, kOutOfMemory };

class FaultPlan {
 public:
  // Parses `spec` (the variable's value; empty: no faults) for this worker.
  static Status Parse(const std::string& spec, int worker_id, int generation, FaultPlan* out);
  static FaultPlan FromEnvironment(int worker_id, int generation);

  // The fault for the batch with this 1-based number, if any (each fires once).
  FaultKind Take(uint64_t batch_number);
  bool fake_gpu() const { return fake_gpu_; }
  bool empty() const { return items_.empty() && !fake_gpu_; }

 private:
  struct Item {
    FaultKind kind;
    uint64_t batch;
    bool fired = false;
  };
  std::vector<Item> items_;
  bool fake_gpu_ = false;
};

// Executes crash/hang, or throws the c10::Error of sticky/oom.
void TriggerFault(FaultKind kind);

}  // namespace torchfarm::worker
