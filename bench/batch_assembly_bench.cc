// Batch assembly: what the supervisor does per batch between receiving requests and ringing a
// worker: queue the requests (ModelQueue::Push), form the batch (TakeBatch), and write it into a
// ring slot with EncodeBatch, as WorkerSlot::Dispatch does (the rows concatenated per input by the
// slot codec, then one TensorDesc per input).
// Argument: batch size (requests of one [1, 256] float32 row each).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "ipc/worker_segment.h"
#include "supervisor/dispatch/model_queue.h"
#include "supervisor/workers/batch_encoder.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {
namespace {

constexpr int64_t kWidth = 256;

PendingRequest MakeRequest(int tag) {
  PendingRequest r;
  r.inputs = {TensorSpec{DType::kFloat32, {1, kWidth}}};
  r.rows = 1;
  r.slot_bytes = kWidth * 4;
  r.id = tag;
  r.frames.emplace_back(static_cast<size_t>(kWidth * 4));
  std::memset(r.frames.back().data(), tag & 0xff, kWidth * 4);
  return r;
}

void BM_BatchAssembly(benchmark::State& state) {
  const int64_t batch_size = state.range(0);
  BatchingPolicy policy;
  policy.max_batch_size = batch_size;
  ModelQueue queue(policy);
  std::unique_ptr<ipc::WorkerSegment> segment;
  std::string name = "torchfarm-microbench-batch-" + std::to_string(::getpid());
  if (!ipc::WorkerSegment::Create(name, 4, 1 << 20, &segment).ok()) std::abort();
  ipc::SpscRing ring = segment->request_ring();
  std::vector<HeldRequest> requests;
  for (int i = 0; i < batch_size; ++i) {
    requests.push_back(std::make_unique<PendingRequest>(MakeRequest(i)));
  }
  const TimePoint now = Clock::now();
  uint64_t batch_id = 0;
  for (auto _ : state) {
    for (auto& r : requests) queue.Push(r);
    InflightBatch batch;
    batch.batch_id = ++batch_id;
    batch.requests = queue.TakeBatch(now);
    batch.rows = static_cast<int64_t>(batch.requests.size());
    uint8_t* slot = ring.TryReserve();
    EncodeBatch(batch, /*shm_in_place=*/false, slot, ring.data_capacity());
    ring.Publish();
    ring.Front();
    ring.Pop();
    requests = std::move(batch.requests);  // the same requests again next round, as fresh arrivals
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.SetBytesProcessed(state.iterations() * batch_size * kWidth * 4);
}
BENCHMARK(BM_BatchAssembly)->Arg(1)->Arg(8)->Arg(32)->Arg(64);

// The queue alone: Push + TakeBatch, no copy. Args: batch size, fair_queueing (0/1), clients the
// requests come from (fair queueing's cost is a hash lookup per push and take, and an ordered
// insert when several clients interleave).
void BM_ModelQueuePushTake(benchmark::State& state) {
  const int64_t batch_size = state.range(0);
  BatchingPolicy policy;
  policy.max_batch_size = batch_size;
  policy.fair_queueing = state.range(1) != 0;
  ModelQueue queue(policy);
  std::vector<HeldRequest> requests;
  for (int i = 0; i < batch_size; ++i) {
    requests.push_back(std::make_unique<PendingRequest>(MakeRequest(i)));
    requests.back()->client = "client-" + std::to_string(i % state.range(2));
  }
  const TimePoint now = Clock::now();
  for (auto _ : state) {
    for (auto& r : requests) queue.Push(r);
    requests = queue.TakeBatch(now);
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
}
BENCHMARK(BM_ModelQueuePushTake)
    ->Args({1, 0, 1})
    ->Args({1, 1, 1})
    ->Args({64, 0, 1})
    ->Args({64, 1, 1})
    ->Args({64, 0, 64})
    ->Args({64, 1, 64});

}  // namespace
}  // namespace torchfarm
