#include "worker/pipeline_stages.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "common/bytes_items.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/tensor_spec.h"
#include "worker/image_decoder.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {

// One batch's items: the sources (encoded images, or rows of the batch's input), what each
// became, and a count of the items still running on the pool.
struct PipelineStages::Batch {
  const uint8_t* request = nullptr;
  uint64_t batch_id = 0;
  std::vector<std::string_view> encoded;  // decode: one JPEG per row, in the request slot
  at::Tensor rows;                        // no decode: the batch's input, rows along dim 0
  std::vector<at::Tensor> items;
  std::vector<Status> statuses;
  std::atomic<int64_t> decode_us{0};  // summed over the items (pool-thread time)
  std::atomic<int64_t> preprocess_us{0};
  std::mutex mutex;
  std::condition_variable done;
  size_t remaining = 0;  // guarded by mutex

  void Wait() {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [this] { return remaining == 0; });
  }
};

namespace {

Status LoadStageModule(const std::string& stage, const std::string& path, torch::jit::Module* out) {
  try {
    *out = torch::jit::load(path, c10::Device(c10::kCPU));
    out->eval();
  } catch (const c10::Error& e) {
    return InvalidArgument("pipeline." + stage + ": cannot load '" + path + "': " + ErrorText(e));
  }
  if (!out->find_method("forward")) {
    return InvalidArgument("pipeline." + stage + ": '" + path + "' has no forward() method");
  }
  return Status::Ok();
}

std::string ShapeOf(const at::Tensor& tensor) {
  return std::string(ScalarTypeName(tensor.scalar_type())) + " " +
         ShapeToString(tensor.sizes().vec());
}

}  // namespace

PipelineStages::PipelineStages(const PipelineConfig& config) : config_(config) {}

PipelineStages::~PipelineStages() { Drain(); }

Status PipelineStages::Create(const PipelineConfig& config, const c10::Device& device,
                              std::unique_ptr<PipelineStages>* out) {
  std::unique_ptr<PipelineStages> stages(new PipelineStages(config));
  if (!config.preprocess.empty()) {
    Status s = LoadStageModule("preprocess", config.preprocess, &stages->preprocess_);
    if (!s.ok()) return s;
    stages->has_preprocess_ = true;
  }
  if (!config.postprocess.empty()) {
    Status s = LoadStageModule("postprocess", config.postprocess, &stages->postprocess_);
    if (!s.ok()) return s;
    stages->postprocess_.to(device);
    stages->has_postprocess_ = true;
  }
  // One intra-op thread per pool thread: the pool's parallelism is across items.
  stages->pool_ = std::make_unique<ThreadPool>(config.threads, [] { SetIntraOpThreads(1); });
  *out = std::move(stages);
  return Status::Ok();
}

void PipelineStages::Drain() {
  if (prefetched_) prefetched_->Wait();
}

std::shared_ptr<PipelineStages::Batch> PipelineStages::Start(const uint8_t* request,
                                                             const ipc::RequestView& view,
                                                             const uint8_t* input_bytes,
                                                             Status* status) {
  auto batch = std::make_shared<Batch>();
  batch->request = request;
  batch->batch_id = view.batch_id;
  if (view.inputs.size() != 1) {
    *status = InvalidArgument("a pipeline model takes one input, the batch has " +
                              std::to_string(view.inputs.size()));
    return nullptr;
  }
  const ipc::RequestTensor& input = view.inputs[0];
  const int64_t rows = Rows(input.spec);
  if (!config_.decode_format.empty()) {
    const std::string_view buffer(reinterpret_cast<const char*>(input_bytes), input.nbytes);
    // The supervisor checked every item against limits.max_item_bytes at intake.
    *status = SplitBytesItems(buffer, static_cast<uint64_t>(rows), kMaxBytesItem, "inputs[0]",
                              &batch->encoded);
    if (!status->ok()) return nullptr;
  } else {
    if (input.spec.shape.empty()) {
      *status = InvalidArgument("preprocess takes rows along dim 0; the input is a scalar");
      return nullptr;
    }
    // from_blob over the slot: read-only here, and the slot outlives the batch.
    batch->rows = torch::from_blob(const_cast<uint8_t*>(input_bytes), input.spec.shape,
                                   at::TensorOptions().dtype(ToScalarType(input.spec.dtype)));
  }
  batch->items.resize(static_cast<size_t>(rows));
  batch->statuses.resize(static_cast<size_t>(rows));
  batch->remaining = static_cast<size_t>(rows);
  for (int64_t row = 0; row < rows; ++row) {
    pool_->Submit([this, batch, row] { RunItem(batch, static_cast<size_t>(row)); });
  }
  *status = Status::Ok();
  return batch;
}

Status PipelineStages::RunItemStages(Batch& batch, size_t row, const char** stage) {
  at::Tensor item;
  const TimePoint start = Clock::now();
  if (!batch.encoded.empty()) {
    Status status = DecodeJpeg(batch.encoded[row], config_.max_pixels, &item);
    batch.decode_us += ToMicros(Clock::now() - start);
    if (!status.ok()) return status;
  } else {
    item = batch.rows[static_cast<int64_t>(row)];
  }
  if (has_preprocess_) {
    *stage = "preprocess";
    const TimePoint decoded = Clock::now();
    const c10::IValue result = preprocess_.forward({item});
    batch.preprocess_us += ToMicros(Clock::now() - decoded);
    if (!result.isTensor()) {
      return InvalidArgument("preprocess returned " + IValueKind(result) + ", not a Tensor");
    }
    item = result.toTensor();
  }
  batch.items[row] = item.contiguous();
  return Status::Ok();
}

void PipelineStages::RunItem(const std::shared_ptr<Batch>& batch, size_t row) {
  InferenceModeGuard inference_mode;
  const char* stage = batch->encoded.empty() ? "preprocess" : "decode";
  Status status;
  // A task must not throw (worker/thread_pool.h): whatever a stage throws fails this row only.
  try {
    status = RunItemStages(*batch, row, &stage);
  } catch (const c10::Error& e) {
    status = InvalidArgument(std::string(stage) + " failed: " + ErrorText(e));
  } catch (const std::exception& e) {
    status = InvalidArgument(std::string(stage) + " failed: " + e.what());
  } catch (...) {
    status = Internal(std::string(stage) + " failed: threw something that is not an exception");
  }
  if (!status.ok()) batch->items[row] = at::Tensor();  // nothing half-made reaches the stack
  batch->statuses[row] = status;
  std::lock_guard<std::mutex> lock(batch->mutex);
  if (--batch->remaining == 0) batch->done.notify_all();
}

void PipelineStages::Prefetch(const uint8_t* request, uint64_t data_capacity) {
  if (request == nullptr || prefetched_) return;
  ipc::RequestView view;
  if (!ipc::ReadRequest(request, data_capacity, &view).ok() || view.inputs.size() != 1 ||
      !view.inputs[0].in_slot()) {
    return;  // Prepare reads it again and answers why
  }
  Status status;
  try {
    prefetched_ = Start(request, view, view.InputBytes(0, nullptr), &status);
  } catch (const std::exception& e) {
    // Not this batch's problem: Prepare starts that slot again when its turn comes and answers.
    TF_LOG(kWarn) << "prefetch failed; the batch is prepared when its turn comes"
                  << Kv("batch", view.batch_id) << Kv("error", e.what());
  }
}

void PipelineStages::DropPrefetchOf(const uint8_t* request) {
  if (!prefetched_ || prefetched_->request != request) return;
  prefetched_->Wait();
  prefetched_.reset();
}

Status PipelineStages::Prepare(const uint8_t* request, const ipc::RequestView& view,
                               const uint8_t* input_bytes, std::vector<c10::IValue>* inputs,
                               ipc::PipelineOutcome* outcome, bool* run_model) {
  std::shared_ptr<Batch> batch = std::move(prefetched_);
  prefetched_.reset();
  if (batch && (batch->request != request || batch->batch_id != view.batch_id)) {
    batch->Wait();  // not this batch's: let its tasks finish before dropping it
    batch.reset();
  }
  if (!batch) {
    Status status;
    batch = Start(request, view, input_bytes, &status);
    if (!batch) return status;
  }
  batch->Wait();
  return Assemble(*batch, inputs, outcome, run_model);
}

Status PipelineStages::Assemble(Batch& batch, std::vector<c10::IValue>* inputs,
                                ipc::PipelineOutcome* outcome, bool* run_model) {
  if (!config_.decode_format.empty()) outcome->decode_us = batch.decode_us.load();
  if (has_preprocess_) outcome->preprocess_us = batch.preprocess_us.load();
  const at::Tensor* first_good = nullptr;
  std::string failures;
  for (size_t row = 0; row < batch.items.size(); ++row) {
    if (!batch.statuses[row].ok()) {
      outcome->row_failures.push_back(
          ipc::RowFailure{static_cast<int64_t>(row), batch.statuses[row]});
      if (failures.size() < 400) {
        failures += "; item " + std::to_string(row) + ": " + batch.statuses[row].message();
      }
      continue;
    }
    const at::Tensor& item = batch.items[row];
    if (!first_good) {
      first_good = &item;
    } else if (item.sizes() != first_good->sizes() ||
               item.scalar_type() != first_good->scalar_type()) {
      return InvalidArgument("item " + std::to_string(row) + " became " + ShapeOf(item) +
                             ", an earlier item " + ShapeOf(*first_good) +
                             "; the rows of a batch must stack (give every image the same size "
                             "in preprocess)");
    }
  }
  if (outcome->row_failures.size() > static_cast<size_t>(ipc::kMaxRowErrors)) {
    return InvalidArgument(std::to_string(outcome->row_failures.size()) + " of " +
                           std::to_string(batch.items.size()) + " items failed" + failures);
  }
  *run_model = first_good != nullptr;
  if (!*run_model) return Status::Ok();
  std::vector<at::Tensor> rows = batch.items;
  for (size_t row = 0; row < rows.size(); ++row) {
    if (!batch.statuses[row].ok()) rows[row] = torch::zeros_like(*first_good);
  }
  inputs->emplace_back(torch::stack(rows, 0));
  return Status::Ok();
}

Status PipelineStages::Postprocess(const std::vector<at::Tensor>& outputs, c10::IValue* result,
                                   ipc::PipelineOutcome* outcome) {
  const TimePoint start = Clock::now();
  try {
    c10::IValue argument;
    if (outputs.size() == 1) {
      argument = outputs[0];
    } else {
      std::vector<c10::IValue> elements(outputs.begin(), outputs.end());
      argument = c10::ivalue::Tuple::create(std::move(elements));
    }
    *result = postprocess_.forward({argument});
  } catch (const c10::Error& e) {
    return Internal("postprocess failed: " + ErrorText(e));
  } catch (const std::exception& e) {
    return Internal(std::string("postprocess failed: ") + e.what());
  }
  outcome->postprocess_us = ToMicros(Clock::now() - start);
  return Status::Ok();
}

}  // namespace torchfarm::worker
