// The worker's pipeline around a model (config "pipeline", common/pipeline_config.h): decode and
// pre-process each item of a batch on a pool of worker threads, stack the items into the model's
// input, and post-process the model's outputs.
//
//   decode       bytes item (one encoded JPEG per row) -> uint8 [H, W, 3] (worker/image_decoder.h)
//   preprocess   preprocess.forward(item) -> the model's input for that row, without the batch
//                dimension; without decode the item is row i of the batch's one input
//   (stack)      the rows stacked along a new dim 0; a row whose item failed is zero-filled and
//                reported (ipc::RowFailure) so only its request fails
//   postprocess  postprocess.forward(outputs) on the compute thread, after the model, on the
//                model's device; returns tensors with the batch dimension first
//
// Overlap (double buffering): while the compute thread runs batch N's model, Prefetch(N + 1)
// decodes and pre-processes the next request slot of the ring on the pool; the slot is not popped
// before its batch is answered, so its bytes stay put and no memory but the ring is shared.
//
// Failures stay with their own rows and batch: a failed item (a JPEG the decoder refuses, a
// preprocess that throws) is a failed row with a Status and no tensor, and the decoder leaves no
// state behind on its thread (worker/jpeg_decoder.h); a batch that fails (too many failed rows,
// rows that do not stack, a model or postprocess that throws) takes nothing from the next one: a
// prefetch belongs to its slot and batch id, and one that is not used is waited for and dropped
// (Prepare of another batch, DropPrefetchOf before its slot is popped).
//
// Owns: the pre/post TorchScript modules, the ThreadPool (worker/thread_pool.h) and the one
// prefetched batch. Threads: every method is called by the compute thread
// (worker/compute_loop.h); pool threads run the per-item work (decode, preprocess.forward) under
// InferenceMode with one intra-op thread each.
#pragma once

#include <torch/script.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "common/pipeline_config.h"
#include "common/status.h"
#include "ipc/slot_codec.h"
#include "worker/thread_pool.h"

namespace torchfarm::worker {

class PipelineStages {
 public:
  // Loads the modules (on the CPU; postprocess is then moved to `device`) and starts the pool.
  // Errors name the stage and the file.
  static Status Create(const PipelineConfig& config, const c10::Device& device,
                       std::unique_ptr<PipelineStages>* out);
  // Waits for a prefetch in progress, then joins the pool.
  ~PipelineStages();
  PipelineStages(const PipelineStages&) = delete;
  PipelineStages& operator=(const PipelineStages&) = delete;

  // Starts decoding and pre-processing request slot `request` (not yet launched; its input in the
  // slot) on the pool, unless a prefetch is already running. A slot it cannot read is left to
  // Prepare, which reports why.
  void Prefetch(const uint8_t* request, uint64_t data_capacity);

  // The model inputs (host tensors) for `request` (read into `view`; `input_bytes`: input 0's
  // first byte, in the slot or in a client region): the prefetched ones for this slot and batch,
  // else prepared now on the pool. `*run_model` false when every row failed (nothing to run;
  // `outcome` names them all). Fails the whole batch (INVALID_ARGUMENT) when more than
  // ipc::kMaxRowErrors items failed or pre-processed items differ in shape.
  Status Prepare(const uint8_t* request, const ipc::RequestView& view, const uint8_t* input_bytes,
                 std::vector<c10::IValue>* inputs, ipc::PipelineOutcome* outcome, bool* run_model);

  // Decode or preprocess: the inputs come from Prepare. Without either (postprocess only) the
  // model's inputs are built as for any model.
  bool has_item_stages() const { return !config_.decode_format.empty() || has_preprocess_; }
  bool has_postprocess() const { return has_postprocess_; }
  // postprocess.forward(one tensor, or a tuple of them) into `*result`; its time into `outcome`.
  Status Postprocess(const std::vector<at::Tensor>& outputs, c10::IValue* result,
                     ipc::PipelineOutcome* outcome);

  // Waits until no pool task refers to a request slot (before the slot can be popped or unmapped).
  void Drain();
  // Before `request`'s slot is popped: a prefetch of it that no Prepare took (its batch failed
  // before its inputs were built) is waited for and dropped.
  void DropPrefetchOf(const uint8_t* request);

 private:
  struct Batch;  // one batch's items in preparation (pipeline_stages.cc)

  explicit PipelineStages(const PipelineConfig& config);
  std::shared_ptr<Batch> Start(const uint8_t* request, const ipc::RequestView& view,
                               const uint8_t* input_bytes, Status* status);
  void RunItem(const std::shared_ptr<Batch>& batch, size_t row);
  // Decode and/or preprocess of one row into batch.items[row]; `*stage` names the one running.
  Status RunItemStages(Batch& batch, size_t row, const char** stage);
  Status Assemble(Batch& batch, std::vector<c10::IValue>* inputs, ipc::PipelineOutcome* outcome,
                  bool* run_model);

  const PipelineConfig config_;
  torch::jit::Module preprocess_;
  torch::jit::Module postprocess_;
  bool has_preprocess_ = false;
  bool has_postprocess_ = false;
  std::shared_ptr<Batch> prefetched_;  // compute thread only
  std::unique_ptr<ThreadPool> pool_;   // last: joined first, while the modules still exist
};

}  // namespace torchfarm::worker
