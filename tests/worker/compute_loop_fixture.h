// ComputeLoopTest: a ComputeLoop on its own thread against a segment created in the test
// process; the test plays the supervisor (writes request slots, rings the doorbell, reads the
// response ring). Shared by the CPU suite (tests/worker) and the GPU suite (tests/gpu).
#pragma once

#include <gtest/gtest.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ipc/slot_codec.h"
#include "worker/compute_loop.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {

inline constexpr auto kWaitLimit = std::chrono::seconds(10);

struct Response {
  uint64_t batch_id = 0;
  int32_t status = -1;  // -1: no response arrived in time
  std::string message;
  std::vector<at::Tensor> outputs;
};

class ComputeLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tf-worker-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    loop_.reset();  // joins the thread before the segment and doorbells go away
    segment_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string precision_ = "fp32";
  std::string optimize_ = "none";  // ComputeLoopConfig::model_optimize
  int idle_spin_us_ = 0;
  std::vector<std::vector<TensorSpec>> warmup_;
  AcceleratorOptions accelerator_;
  PipelineConfig pipeline_;  // worker/pipeline_stages.h; none by default

  std::string Save(const std::string& name, const std::string& source,
                   const std::vector<std::pair<std::string, at::Tensor>>& parameters = {}) {
    torch::jit::Module module(name);
    for (const auto& [parameter, value] : parameters) {
      module.register_parameter(parameter, value, false);
    }
    module.define(source);
    std::string path = (dir_ / (name + ".pt")).string();
    module.save(path);
    return path;
  }

  // A two-layer MLP [B, 16] -> [B, 8] with weights from torch's current seed.
  std::string SaveMlp() {
    return Save("Mlp", R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t()) + self.b2
)",
                {{"w1", torch::randn({32, 16})},
                 {"b1", torch::randn({32})},
                 {"w2", torch::randn({8, 32})},
                 {"b2", torch::randn({8})}});
  }

  // Creates the segment and doorbells, starts the loop and waits until the load finished.
  LoadReport Start(const std::string& model_path, uint64_t data_bytes = 1 << 20,
                   const std::string& device = "cpu", const std::string& faults = "") {
    std::string name = "tf-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_);
    EXPECT_TRUE(ipc::WorkerSegment::Create(name, 4, data_bytes, &segment_).ok());
    EXPECT_TRUE(ipc::Doorbell::Create(&request_doorbell_).ok());
    EXPECT_TRUE(ipc::Doorbell::Create(&response_doorbell_).ok());
    ComputeLoopConfig config;
    config.model_path = model_path;
    config.device = device;
    config.precision = precision_;
    config.model_optimize = optimize_;
    config.idle_spin_us = idle_spin_us_;
    config.warmup = warmup_;
    config.accelerator = accelerator_;
    config.pipeline = pipeline_;
    EXPECT_TRUE(FaultPlan::Parse(faults, /*worker_id=*/0, /*generation=*/0, &config.faults).ok());
    loop_ = std::make_unique<ComputeLoop>(config, segment_.get(), &request_doorbell_,
                                          &response_doorbell_);
    EXPECT_TRUE(loop_->Start().ok());
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    while (loop_->load_report().state == LoadState::kLoading &&
           std::chrono::steady_clock::now() < deadline) {
      loop_->events().Wait(100);
      loop_->events().Drain();
    }
    return loop_->load_report();
  }

  // Writes one request slot the way the supervisor does (ipc/slot_codec.h) and rings the doorbell.
  // `ring` false leaves the doorbell alone (a worker that polls its ring finds it anyway).
  void Submit(uint64_t batch_id, const std::vector<at::Tensor>& inputs, bool ring = true) {
    uint8_t* slot = segment_->request_ring().TryReserve();
    ASSERT_NE(slot, nullptr);
    ipc::RequestBatch batch;
    batch.batch_id = batch_id;
    std::vector<at::Tensor> contiguous;
    for (const at::Tensor& input : inputs) {
      contiguous.push_back(input.contiguous());
      const at::Tensor& tensor = contiguous.back();
      ipc::RequestInput encoded;
      encoded.spec = TensorSpec{*FromScalarType(tensor.scalar_type()), tensor.sizes().vec()};
      encoded.parts.push_back(ipc::TensorPart{static_cast<const uint8_t*>(tensor.data_ptr()),
                                              static_cast<uint64_t>(tensor.nbytes()), false});
      batch.inputs.push_back(std::move(encoded));
    }
    Status written = ipc::WriteRequest(batch, slot, segment_->data_capacity(), /*report=*/nullptr);
    ASSERT_TRUE(written.ok()) << written.ToString();
    segment_->request_ring().Publish();
    if (ring) request_doorbell_.Ring();
  }

  Response Await() {
    Response response;
    const ipc::SpscRing ring = segment_->response_ring();
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    uint8_t* slot = nullptr;
    while ((slot = ring.Front()) == nullptr) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "no response within " << kWaitLimit.count() << " s";
        return response;
      }
      response_doorbell_.Wait(100);
      response_doorbell_.Drain();
    }
    const ipc::SlotHeader* header = ipc::SlotHeaderOf(slot);
    response.batch_id = header->batch_id;
    response.status = header->status;
    response.message = header->message;
    for (uint32_t i = 0; i < header->tensor_count; ++i) {
      TensorSpec spec;
      EXPECT_TRUE(ipc::ReadTensorDesc(header->tensors[i], &spec));
      auto options = at::TensorOptions().dtype(ToScalarType(spec.dtype));
      response.outputs.push_back(
          torch::from_blob(ipc::SlotData(slot) + header->tensors[i].offset, spec.shape, options)
              .clone());
    }
    ring.Pop();
    return response;
  }

  static int32_t Code(StatusCode code) { return static_cast<int32_t>(code); }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<ipc::WorkerSegment> segment_;
  ipc::Doorbell request_doorbell_;
  ipc::Doorbell response_doorbell_;
  std::unique_ptr<ComputeLoop> loop_;
};

}  // namespace torchfarm::worker
