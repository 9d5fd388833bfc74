#include "worker/fault_injection.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "common/log.h"

namespace torchfarm::worker {

Status FaultPlan::Parse(const std::string& spec, int worker_id, int generation, FaultPlan* out) {
  FaultPlan plan;
  size_t start = 0;
  while (start <= spec.size() && !spec.empty()) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    if (item == "fakegpu") {
      plan.fake_gpu_ = true;
      continue;
    }
    size_t at = item.find('@');
    size_t slash = item.find("/w");
    std::string kind = item.substr(0, at);
    FaultKind k = kind == "crash" ? FaultKind::kCrash
                : kind == "hang" ? FaultKind::kHang
                : kind == "sticky" ? FaultKind::kSticky
                : kind == "oom" ? FaultKind::kOutOfMemory
                                : FaultKind::kNone;
    uint64_t batch = 0;
    int only_worker = -1;
    try {
      if (at == std::string::npos) throw std::invalid_argument("no @");
      batch = std::stoull(item.substr(at + 1, slash == std::string::npos ? std::string::npos : slash - at - 1));
      if (slash != std::string::npos) only_worker = std::stoi(item.substr(slash + 2));
    } catch (const std::exception&) {
      k = FaultKind::kNone;
    }
    if (k == FaultKind::kNone || batch == 0) {
      return InvalidArgument("TORCHFARM_FAULT: expected KIND@N[/wID] with KIND crash|hang|sticky|oom "
                             "and N >= 1, or fakegpu; got '" + item + "'");
    }
    if (generation == 0 && (only_worker < 0 || only_worker == worker_id)) {
      plan.items_.push_back({k, batch});
    }
  }
  *out = std::move(plan);
  return Status::Ok();
}

FaultPlan FaultPlan::FromEnvironment(int worker_id, int generation) {
  const char* spec = std::getenv("TORCHFARM_FAULT");
  FaultPlan plan;
  if (spec == nullptr) return plan;
  Status s = Parse(spec, worker_id, generation, &plan);
  if (!s.ok()) {
    TF_LOG(kError) << "ignoring fault injection" << Kv("error", s.message());
  } else if (!plan.empty()) {
    TF_LOG(kWarn) << "fault injection active (tests only)" << Kv("TORCHFARM_FAULT", spec);
  }
  return plan;
}

FaultKind FaultPlan::Take(uint64_t batch_number) {
  for (auto& item : items_) {
    if (!item.fired && item.batch == batch_number) {
      item.fired = true;
      return item.kind;
    }
  }
  return FaultKind::kNone;
}

void TriggerFault(FaultKind kind) {
  switch (kind) {
    case FaultKind::kNone:
      return;
    case FaultKind::kCrash:
      TF_LOG(kWarn) << "fault injection: crashing with SIGSEGV";
      std::raise(SIGSEGV);
      return;
    case FaultKind::kHang:
      TF_LOG(kWarn) << "fault injection: hanging in this batch";
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case FaultKind::kSticky:
      TORCH_CHECK(false, "CUDA error: an illegal memory access was encountered\n"
                         "CUDA kernel errors might be asynchronously reported at some other API "
                         "call (fault injection)");
    case FaultKind::kOutOfMemory:
      TORCH_CHECK(false, "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
                         "capacity; fault injection)");
  }
}

}  // namespace torchfarm::worker
