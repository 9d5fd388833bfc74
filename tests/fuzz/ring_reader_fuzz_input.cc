#include "ring_reader_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "common/log.h"
#include "ipc/slot_codec.h"
#include "supervisor/workers/batch_encoder.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm::fuzz {
namespace {

[[noreturn]] void RingFail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz invariant broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The operands of an op; bytes past the end of the input read as zero.
struct OpReader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool done() const { return at >= size; }
  uint64_t Take(size_t bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i, ++at) {
      value |= uint64_t{at < size ? data[at] : uint8_t{0}} << (8 * i);
    }
    return value;
  }
};

uint64_t TouchAll(const uint8_t* bytes, uint64_t nbytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < nbytes; ++i) sum += bytes[i];
  return sum;
}

// One fuzz run: a launched, ready slot, the worker's side of its segment, and the counts the
// invariants compare.
class RingRun {
 public:
  RingRun() {
    model_ = testing::SmallModel("fuzz");
    slot_ = std::make_unique<WorkerSlot>(0, model_, model_.instances[0], 0);
    context_.worker_binary = "/nonexistent/torchfarm-worker";
    context_.segment_prefix = testing::UniqueSegmentPrefix();
    context_.launcher = &launcher_;
    if (!slot_->Launch(context_, clock_.Now(), RestartPolicy{}).ok() ||
        !testing::FakeWorker::Open(launcher_.last(), &worker_).ok() ||
        !ipc::WorkerSegment::Open(launcher_.last().spec.args.segment, &view_).ok()) {
      RingFail("setup", "cannot launch the fake worker");
    }
    testing::MakeReady(*slot_, clock_.Now());
    header_ = reinterpret_cast<ipc::SegmentHeader*>(view_->base());
  }

  void Run(OpReader& ops) {
    while (!ops.done()) Step(ops);
    Collect();
  }

 private:
  void Step(OpReader& ops) {
    switch (ops.Take(1) % 8) {
      case 0:
        Dispatch();
        break;
      case 1:
        worker_->ServeOne();
        break;
      case 2:
        header_->response_head.value.store(ops.Take(8));
        break;
      case 3:
        header_->response_head.value.fetch_add(ops.Take(1));
        break;
      case 4:
        header_->request_tail.value.store(ops.Take(8));
        break;
      case 5:
        header_->response_tail.value.store(ops.Take(8));
        break;
      case 6:
        WriteHeaderBytes(ops);
        break;
      default:
        Collect();
        break;
    }
  }

  void Dispatch() {
    if (!slot_->CanAccept()) return;
    InflightBatch batch;
    batch.batch_id = ++dispatched_;
    PendingRequest request;
    request.inputs = {TensorSpec{DType::kFloat32, {1, 2}}};
    request.frames.emplace_back(8);
    std::memset(request.frames.back().data(), 0, 8);
    request.slot_bytes = ipc::kTensorAlignment;
    batch.requests.push_back(std::make_unique<PendingRequest>(std::move(request)));
    batch.rows = 1;
    batch.dispatched = clock_.Now();
    if (!slot_->Dispatch(batch)) --dispatched_;
  }

  void WriteHeaderBytes(OpReader& ops) {
    const ipc::SpscRing responses = view_->response_ring();
    uint8_t* slot = responses.SlotAt(ops.Take(1));
    const uint64_t offset = ops.Take(2) % sizeof(ipc::SlotHeader);
    const uint64_t length = ops.Take(1);
    for (uint64_t i = 0; i < length && offset + i < sizeof(ipc::SlotHeader); ++i) {
      slot[offset + i] = static_cast<uint8_t>(ops.Take(1));
    }
  }

  void Collect() {
    const bool violated_before = slot_->protocol_violations() > 0;
    slot_->CollectResponses(clock_, [&](InflightBatch& batch, const uint8_t* response) {
      return Read(batch, response, violated_before);
    });
    if (slot_->protocol_violations() > 0 && slot_->CanAccept()) {
      RingFail("after a violation", "the slot still accepts batches");
    }
  }

  std::optional<ipc::ProtocolViolation> Read(InflightBatch& batch, const uint8_t* response,
                                             bool violated_before) {
    const PinnedResponseRing& ring = *slot_->responses();
    const uint8_t* first = ring.segment().response_ring().SlotAt(0);
    const uint64_t slot_bytes = ring.segment().response_ring().slot_bytes();
    if (violated_before) RingFail("after a violation", "a response was read");
    if (response < first || response >= first + uint64_t{ring.slot_count()} * slot_bytes ||
        (response - first) % slot_bytes != 0) {
      RingFail("response slot", "outside the response slots");
    }
    if (++read_ > dispatched_) {
      RingFail("responses read", std::to_string(read_) + " for " + std::to_string(dispatched_) +
                                     " batches dispatched");
    }
    ipc::ResponseView view;
    const Status s =
        ipc::ReadResponse(response, ExpectedResponse(batch, ring.segment().data_capacity()), &view);
    if (view.violation) return ipc::ProtocolViolation{"response slot header", s.message(), "-"};
    for (size_t i = 0; s.ok() && i < view.outputs.size(); ++i) {
      const auto [bytes, nbytes] = view.OutputRows(i, 0, 0);
      if (bytes && (bytes < ipc::SlotData(response) ||
                    bytes + nbytes > ipc::SlotData(response) + ring.segment().data_capacity())) {
        RingFail("accepted output", "outside its slot's data area");
      }
      if (bytes) TouchAll(bytes, nbytes);
    }
    return std::nullopt;
  }

  FakeTimeSource clock_;
  ModelConfig model_;
  testing::FakeWorkerLauncher launcher_;
  LaunchContext context_;
  std::unique_ptr<WorkerSlot> slot_;
  std::unique_ptr<testing::FakeWorker> worker_;
  std::unique_ptr<ipc::WorkerSegment> view_;  // the worker's mapping, for raw writes
  ipc::SegmentHeader* header_ = nullptr;
  uint64_t dispatched_ = 0;
  uint64_t read_ = 0;
};

}  // namespace

void RunRingReaderInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    // Above kError: a violation logs one line per run, and the fuzzer runs millions.
    SetLogLevel(static_cast<LogLevel>(static_cast<int>(LogLevel::kError) + 1));
    return true;
  }();
  (void)quiet;
  OpReader ops{data, size};
  RingRun run;
  run.Run(ops);
}

}  // namespace torchfarm::fuzz
