// Test support for the process seam (supervisor/workers/worker_launcher.h): a launcher that
// starts no process, and a worker the test plays by hand on the real segment and doorbells.
//
//   FakeWorkerLauncher  records each WorkerProcessSpec a slot hands over, keeps its two doorbells
//                       (dup'ed, so they outlive the slot's) and answers with a pid no process can
//                       have (kill() on it gives ESRCH).
//   FakeWorker          opens a recorded launch's segment by name and does what a worker's
//                       compute loop does (worker/compute_loop.cc: ReadRequest, BeginResponse ...
//                       FinishResponse, publish, ring), with a function of the test in place of
//                       the model. Nothing runs unless the test calls it: a batch not served sits
//                       "running" in the ring.
//   MakeReady           the worker's hello and ready, without ZeroMQ.
//   UniqueSegmentPrefix segment names of their own for each test (LaunchContext::segment_prefix).
//
// No fork, no threads, no sleeps. Loop thread (the test's) only.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "ipc/doorbell.h"
#include "ipc/slot_codec.h"
#include "ipc/worker_segment.h"
#include "supervisor/workers/worker_launcher.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm::testing {

// One launch as the slot prepared it, with the worker's ends of its doorbells.
struct FakeLaunch {
  WorkerProcessSpec spec;
  pid_t pid = -1;
  TimePoint at{};
  ipc::Doorbell request_doorbell;   // the fd the worker would see as args.request_doorbell_fd
  ipc::Doorbell response_doorbell;  // args.response_doorbell_fd
};

class FakeWorkerLauncher final : public WorkerLauncher {
 public:
  // Above the kernel's pid_max ceiling (4194304): never a process, so kill() answers ESRCH.
  static constexpr pid_t kFirstFakePid = 0x7ff00000;

  Status Start(const WorkerProcessSpec& spec, TimePoint now, LaunchedProcess* out) override {
    out->pid = -1;
    out->via = "fake";
    if (!next_failure_.ok()) return std::exchange(next_failure_, Status::Ok());
    FakeLaunch launch;
    launch.spec = spec;
    launch.at = now;
    Status s = Adopt(spec, spec.args.request_doorbell_fd, &launch.request_doorbell);
    if (s.ok()) s = Adopt(spec, spec.args.response_doorbell_fd, &launch.response_doorbell);
    if (!s.ok()) return s;
    launch.pid = kFirstFakePid + static_cast<pid_t>(launches_.size());
    out->pid = launch.pid;
    launches_.push_back(std::move(launch));
    return Status::Ok();
  }

  // The next Start fails with `status` (a fork or descriptor failure) and records nothing.
  void FailNext(Status status) { next_failure_ = std::move(status); }

  // Every successful launch, oldest first; references stay valid (a deque only grows).
  const std::deque<FakeLaunch>& launches() const { return launches_; }
  const FakeLaunch& last() const { return launches_.back(); }
  const FakeLaunch* ForPid(pid_t pid) const {
    for (const FakeLaunch& launch : launches_) {
      if (launch.pid == pid) return &launch;
    }
    return nullptr;
  }

 private:
  // A duplicate of the supervisor-side fd the spec maps to `target`.
  static Status Adopt(const WorkerProcessSpec& spec, int target, ipc::Doorbell* out) {
    for (const FdMapping& mapping : spec.fds) {
      if (mapping.target != target) continue;
      const int fd = ::dup(mapping.source);
      if (fd < 0) return Internal("dup of fd " + std::to_string(mapping.source) + " failed");
      *out = ipc::Doorbell::Adopt(fd);
      return Status::Ok();
    }
    return Internal("the launch maps no fd to " + std::to_string(target) +
                    ", the doorbell fd its arguments name");
  }

  std::deque<FakeLaunch> launches_;
  Status next_failure_;
};

// What the worker read from one request slot: the batch's inputs, copied out of the slot.
struct FakeBatch {
  uint64_t batch_id = 0;
  std::vector<TensorSpec> specs;
  std::vector<std::vector<uint8_t>> inputs;  // bytes of each input (C-contiguous)
  int64_t rows = 0;                          // dim 0 of input 0 (1 for a scalar)

  template <typename T>
  std::vector<T> Values(size_t input) const {
    std::vector<T> values(inputs[input].size() / sizeof(T));
    if (!values.empty()) std::memcpy(values.data(), inputs[input].data(), inputs[input].size());
    return values;
  }
};

// A model's outputs for a batch, as the fake computes them.
struct FakeOutputs {
  Status status;  // not OK: the batch fails with it (the outputs are dropped)
  std::vector<TensorSpec> specs;
  std::vector<std::vector<uint8_t>> bytes;
};
using FakeModel = std::function<FakeOutputs(const FakeBatch&)>;

// Every input back as an output of the same spec; float32 values plus one, others unchanged.
inline FakeOutputs AddOne(const FakeBatch& batch) {
  FakeOutputs out;
  out.specs = batch.specs;
  out.bytes = batch.inputs;
  for (size_t i = 0; i < batch.specs.size(); ++i) {
    if (batch.specs[i].dtype != DType::kFloat32) continue;
    std::vector<float> values = batch.Values<float>(i);
    for (float& v : values) v += 1;
    std::memcpy(out.bytes[i].data(), values.data(), out.bytes[i].size());
  }
  return out;
}

// A model that fails every batch with `status` (e.g. INVALID_ARGUMENT: one input it cannot take).
inline FakeModel FailWith(Status status) {
  return [status](const FakeBatch&) {
    FakeOutputs out;
    out.status = status;
    return out;
  };
}

class FakeWorker {
 public:
  // Maps the segment `launch` names, as a worker does at start-up.
  static Status Open(const FakeLaunch& launch, std::unique_ptr<FakeWorker>* out) {
    std::unique_ptr<ipc::WorkerSegment> segment;
    Status s = ipc::WorkerSegment::Open(launch.spec.args.segment, &segment);
    if (!s.ok()) return s;
    out->reset(new FakeWorker(launch, std::move(segment)));
    return Status::Ok();
  }

  // Requests published to this worker and not answered yet.
  size_t pending() const { return static_cast<size_t>(segment_->request_ring().Size()); }
  // Rings of the request doorbell since the last call (the supervisor rings once per batch).
  uint64_t TakeRequestRings() { return launch_.request_doorbell.Drain(); }

  // Reads every pending request without answering it: the batches stay "running", as on a worker
  // that is busy or hung.
  std::vector<FakeBatch> Hold() const {
    std::vector<FakeBatch> held;
    const ipc::SpscRing requests = segment_->request_ring();
    for (uint64_t i = 0; const uint8_t* slot = requests.PeekAt(i); ++i) {
      ipc::RequestView view;
      FakeBatch batch;
      if (Read(slot, &view, &batch).ok()) held.push_back(std::move(batch));
    }
    return held;
  }

  // Answers the oldest pending request with `model`, as the compute loop does; false when none is
  // pending or the response ring is full.
  bool ServeOne(const FakeModel& model = AddOne) {
    const ipc::SpscRing requests = segment_->request_ring();
    const ipc::SpscRing responses = segment_->response_ring();
    const uint8_t* request = requests.Front();
    if (request == nullptr) return false;
    uint8_t* response = responses.TryReserve();
    if (response == nullptr) return false;
    ipc::BeginResponse(request, response);
    ipc::RequestView view;
    FakeBatch batch;
    Status status = Read(request, &view, &batch);
    if (status.ok()) status = Write(view, model(batch), response);
    if (status.ok()) served_.push_back(std::move(batch));
    ipc::FinishResponse(status, compute_us, response);
    responses.Publish();
    launch_.response_doorbell.Ring();
    requests.Pop();  // only now: the inputs were read from the request slot
    return true;
  }

  // Answers every pending request; returns how many.
  int ServeAll(const FakeModel& model = AddOne) {
    launch_.request_doorbell.Drain();  // before emptying the ring, as the worker does
    int answered = 0;
    while (ServeOne(model)) ++answered;
    return answered;
  }

  // The batches answered OK, oldest first (failed and unreadable ones are left out).
  const std::vector<FakeBatch>& served() const { return served_; }
  const FakeLaunch& launch() const { return launch_; }
  uint64_t compute_us = 100;  // what each response reports as its compute time

 private:
  FakeWorker(const FakeLaunch& launch, std::unique_ptr<ipc::WorkerSegment> segment)
      : launch_(launch), segment_(std::move(segment)) {}

  Status Read(const uint8_t* slot, ipc::RequestView* view, FakeBatch* batch) const {
    Status s = ipc::ReadRequest(slot, segment_->data_capacity(), view);
    if (!s.ok()) return s;
    batch->batch_id = view->batch_id;
    for (size_t i = 0; i < view->inputs.size(); ++i) {
      const ipc::RequestTensor& tensor = view->inputs[i];
      if (!tensor.in_slot()) return Internal("the fake worker reads no client regions");
      const uint8_t* bytes = view->InputBytes(i, nullptr);
      batch->specs.push_back(tensor.spec);
      batch->inputs.emplace_back(bytes, bytes + tensor.nbytes);
    }
    batch->rows =
        batch->specs.empty() || batch->specs[0].shape.empty() ? 1 : batch->specs[0].shape[0];
    return Status::Ok();
  }

  Status Write(const ipc::RequestView& view, const FakeOutputs& outputs, uint8_t* response) const {
    if (!outputs.status.ok()) return outputs.status;
    ipc::OutputPlacement placement;
    Status s =
        ipc::PlaceResponseOutputs(outputs.specs, view, segment_->data_capacity(), &placement);
    if (!s.ok()) return s;
    if (!placement.in_slot()) return Internal("the fake worker writes no client regions");
    for (size_t i = 0; i < outputs.specs.size(); ++i) {
      if (outputs.bytes[i].empty()) continue;
      std::memcpy(ipc::OutputBytes(placement, i, response, nullptr), outputs.bytes[i].data(),
                  outputs.bytes[i].size());
    }
    ipc::WriteResponseOutputs(outputs.specs, placement, response);
    return Status::Ok();
  }

  const FakeLaunch& launch_;
  std::unique_ptr<ipc::WorkerSegment> segment_;
  std::vector<FakeBatch> served_;
};

// A model small enough for many test segments: float32 [-1, 2] inputs, 4 KiB slots, 4 per ring;
// one instance group of `count` serving workers and `spares` spares.
inline ModelConfig SmallModel(const std::string& name = "m", int count = 1, int spares = 0) {
  ModelConfig m;
  m.name = name;
  m.path = "/nonexistent/" + name + ".pt";
  m.inputs = {TensorSpec{DType::kFloat32, {-1, 2}}};
  m.slot_bytes = 4096;
  m.ring_slots = 4;
  InstanceConfig instance;
  instance.count = count;
  instance.spares = spares;
  m.instances = {instance};
  return m;
}

// A prefix for segment names that no other test, in this process or another, uses.
inline std::string UniqueSegmentPrefix() {
  static int counter = 0;
  return "torchfarm-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-";
}

// Whether a POSIX shared-memory object of this name exists (Linux keeps them in /dev/shm).
inline bool SegmentExists(const std::string& name) {
  return ::access(("/dev/shm/" + name).c_str(), F_OK) == 0;
}

// What the worker's hello and ready messages do to its slot (kStarting -> kReady).
inline void MakeReady(WorkerSlot& slot, TimePoint now) {
  slot.OnHello(now);
  slot.OnReady(now, /*load_ms=*/0);
}

}  // namespace torchfarm::testing
