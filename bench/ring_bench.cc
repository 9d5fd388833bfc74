// Ring push/pop: the shared-memory hand-off between supervisor and worker, alone and with the
// eventfd doorbell each hand-off rings (two syscalls: the producer's write, the consumer's read).
// Both halves run on one thread here, so the figures are the ring's own cost without a cache-line
// transfer between cores; the doorbell variant shows what the syscalls add.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "ipc/doorbell.h"
#include "ipc/worker_segment.h"

namespace torchfarm {
namespace {

std::unique_ptr<ipc::WorkerSegment> MakeSegment() {
  std::unique_ptr<ipc::WorkerSegment> segment;
  std::string name = "torchfarm-microbench-" + std::to_string(::getpid());
  if (!ipc::WorkerSegment::Create(name, 4, 4096, &segment).ok()) std::abort();
  return segment;
}

void BM_RingPushPop(benchmark::State& state) {
  auto segment = MakeSegment();
  ipc::SpscRing ring = segment->request_ring();
  uint64_t batch_id = 0;
  for (auto _ : state) {
    uint8_t* slot = ring.TryReserve();
    ipc::SlotHeaderOf(slot)->batch_id = ++batch_id;
    ring.Publish();
    const uint8_t* front = ring.Front();
    benchmark::DoNotOptimize(ipc::SlotHeaderOf(front)->batch_id);
    ring.Pop();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RingPushPop);

void BM_RingPushPopWithDoorbell(benchmark::State& state) {
  auto segment = MakeSegment();
  ipc::SpscRing ring = segment->request_ring();
  ipc::Doorbell bell;
  if (!ipc::Doorbell::Create(&bell).ok()) std::abort();
  uint64_t batch_id = 0;
  for (auto _ : state) {
    uint8_t* slot = ring.TryReserve();
    ipc::SlotHeaderOf(slot)->batch_id = ++batch_id;
    ring.Publish();
    bell.Ring();
    bell.Drain();
    const uint8_t* front = ring.Front();
    benchmark::DoNotOptimize(ipc::SlotHeaderOf(front)->batch_id);
    ring.Pop();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RingPushPopWithDoorbell);

}  // namespace
}  // namespace torchfarm
