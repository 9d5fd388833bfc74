// ComputeLoop on its own thread against a segment created in this process; the test plays the
// supervisor: it writes request slots, rings the request doorbell and reads the response ring.
#include "worker/compute_loop.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "ipc/shm_layout.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

constexpr auto kWaitLimit = std::chrono::seconds(10);

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

  // Writes one request slot the way the supervisor does and rings the doorbell.
  void Submit(uint64_t batch_id, const std::vector<at::Tensor>& inputs) {
    uint8_t* slot = segment_->request_ring().TryReserve();
    ASSERT_NE(slot, nullptr);
    ipc::SlotHeader* header = ipc::SlotHeaderOf(slot);
    header->batch_id = batch_id;
    header->tensor_count = static_cast<uint32_t>(inputs.size());
    header->status = 0;
    uint64_t offset = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor tensor = inputs[i].contiguous();
      TensorSpec spec{*FromScalarType(tensor.scalar_type()), tensor.sizes().vec()};
      offset = ipc::AlignUp(offset, ipc::kTensorAlignment);
      std::memcpy(ipc::SlotData(slot) + offset, tensor.data_ptr(), tensor.nbytes());
      ipc::FillTensorDesc(spec, offset, tensor.nbytes(), &header->tensors[i]);
      offset += tensor.nbytes();
    }
    segment_->request_ring().Publish();
    request_doorbell_.Ring();
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

TEST_F(ComputeLoopTest, MlpOutputEqualsDirectForward) {
  torch::manual_seed(1);
  std::string path = Save("Mlp", R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t()) + self.b2
)",
                          {{"w1", torch::randn({32, 16})},
                           {"b1", torch::randn({32})},
                           {"w2", torch::randn({8, 32})},
                           {"b2", torch::randn({8})}});
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  at::Tensor x = torch::randn({5, 16});
  Submit(42, {x});
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  EXPECT_EQ(response.batch_id, 42u);
  ASSERT_EQ(response.outputs.size(), 1u);

  torch::jit::Module direct = torch::jit::load(path);
  at::Tensor expected = direct.forward({x}).toTensor();
  EXPECT_EQ(response.outputs[0].sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(response.outputs[0], expected, 1e-5, 1e-5));
  ComputeStats stats = loop_->stats();
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_EQ(stats.rows, 5u);
  EXPECT_EQ(stats.errors, 0u);
}

TEST_F(ComputeLoopTest, ForwardErrorFailsOnlyThatBatch) {
  at::Tensor w = torch::randn({3, 3});
  std::string path =
      Save("Mm", "def forward(self, x):\n    return torch.mm(x, self.w)\n", {{"w", w}});
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  Submit(1, {torch::ones({2, 4})});
  Response bad = Await();
  EXPECT_EQ(bad.batch_id, 1u);
  EXPECT_EQ(bad.status, Code(StatusCode::kInternal));
  EXPECT_EQ(bad.message.rfind("forward failed: ", 0), 0u) << bad.message;
  EXPECT_NE(bad.message.find("cannot be multiplied"), std::string::npos) << bad.message;
  EXPECT_TRUE(bad.outputs.empty());

  at::Tensor x = torch::randn({2, 3});
  Submit(2, {x});
  Response good = Await();
  ASSERT_EQ(good.status, Code(StatusCode::kOk)) << good.message;
  EXPECT_EQ(good.batch_id, 2u);
  EXPECT_TRUE(torch::allclose(good.outputs.at(0), torch::mm(x, w)));
  EXPECT_EQ(loop_->stats().errors, 1u);
  EXPECT_EQ(loop_->stats().batches, 2u);
}

TEST_F(ComputeLoopTest, PairReturnsTwoOutputs) {
  std::string path = Save("Pair", "def forward(self, a, b):\n    return (a + b, a * b)\n");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  at::Tensor a = torch::randn({3, 7});
  at::Tensor b = torch::randn({3, 7});
  Submit(7, {a, b});
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  ASSERT_EQ(response.outputs.size(), 2u);
  EXPECT_TRUE(torch::equal(response.outputs[0], a + b));
  EXPECT_TRUE(torch::equal(response.outputs[1], a * b));
}

TEST_F(ComputeLoopTest, OutputTooBigForSlotIsResourceExhausted) {
  std::string path = Save("Twice", "def forward(self, x):\n    return torch.cat([x, x], 1)\n");
  ASSERT_EQ(Start(path, /*data_bytes=*/4096).state, LoadState::kLoaded);
  Submit(1, {torch::ones({1, 600})});  // 2,400 bytes in, 4,800 out
  Response big = Await();
  EXPECT_EQ(big.status, Code(StatusCode::kResourceExhausted));
  EXPECT_NE(big.message.find("outputs need 4800 bytes, a response slot holds 4096 bytes"),
            std::string::npos)
      << big.message;
  EXPECT_NE(big.message.find("raise slot_bytes"), std::string::npos);

  Submit(2, {torch::arange(4, torch::kFloat32).reshape({1, 4})});
  Response small = Await();
  ASSERT_EQ(small.status, Code(StatusCode::kOk)) << small.message;
  EXPECT_TRUE(
      torch::equal(small.outputs.at(0),
                   torch::tensor({0.f, 1.f, 2.f, 3.f, 0.f, 1.f, 2.f, 3.f}).reshape({1, 8})));
}

TEST_F(ComputeLoopTest, UnsupportedOutputsAreNamed) {
  std::string path = Save("Odd", R"(
def forward(self, x):
    return torch.view_as_complex(x.reshape([1, 2]))
)");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  Submit(1, {torch::tensor({1.f, 2.f})});
  Response complex = Await();
  EXPECT_EQ(complex.status, Code(StatusCode::kInternal));
  EXPECT_NE(complex.message.find("ComplexFloat"), std::string::npos) << complex.message;

  std::string int_path = Save("Int", "def forward(self, x):\n    return 3\n");
  loop_.reset();
  segment_.reset();
  ASSERT_EQ(Start(int_path).state, LoadState::kLoaded);
  Submit(2, {torch::ones({1})});
  Response integer = Await();
  EXPECT_EQ(integer.status, Code(StatusCode::kInternal));
  EXPECT_NE(integer.message.find("model returned Int"), std::string::npos) << integer.message;
}

TEST_F(ComputeLoopTest, BadDescriptorIsAnsweredAndServingContinues) {
  std::string path = Save("Identity", "def forward(self, x):\n    return x\n");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  // A descriptor whose nbytes disagrees with its dtype and shape.
  uint8_t* slot = segment_->request_ring().TryReserve();
  ASSERT_NE(slot, nullptr);
  ipc::SlotHeader* header = ipc::SlotHeaderOf(slot);
  header->batch_id = 2;
  header->tensor_count = 1;
  ipc::FillTensorDesc(TensorSpec{DType::kFloat32, {2, 2}}, 0, 12, &header->tensors[0]);
  segment_->request_ring().Publish();
  request_doorbell_.Ring();
  Response bad = Await();
  EXPECT_EQ(bad.status, Code(StatusCode::kInternal));
  EXPECT_NE(bad.message.find("needs 16 bytes but its descriptor says 12"), std::string::npos)
      << bad.message;

  Submit(3, {torch::full({1, 3}, 2.5f)});
  Response good = Await();
  ASSERT_EQ(good.status, Code(StatusCode::kOk)) << good.message;
  EXPECT_TRUE(torch::equal(good.outputs.at(0), torch::full({1, 3}, 2.5f)));
}

TEST_F(ComputeLoopTest, LoadFailureIsReported) {
  LoadReport report = Start((dir_ / "missing.pt").string());
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_FALSE(report.error.empty());
  EXPECT_TRUE(loop_->JoinFor(std::chrono::seconds(5)));
  EXPECT_TRUE(loop_->finished());
}

TEST_F(ComputeLoopTest, StopFinishesWhatIsInTheRing) {
  std::string path = Save("Identity", "def forward(self, x):\n    return x\n");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  for (uint64_t id = 1; id <= 3; ++id) Submit(id, {torch::full({1}, static_cast<float>(id))});
  loop_->RequestStop(StopMode::kFinishRing);
  ASSERT_TRUE(loop_->JoinFor(std::chrono::seconds(10)));
  for (uint64_t id = 1; id <= 3; ++id) {
    Response response = Await();
    ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
    EXPECT_EQ(response.batch_id, id);
    EXPECT_EQ(response.outputs.at(0).item<float>(), static_cast<float>(id));
  }
  EXPECT_EQ(loop_->stats().batches, 3u);
}

}  // namespace
}  // namespace torchfarm::worker

namespace torchfarm::worker {
namespace {

// Out-of-memory on a batch is retried as two half batches whose outputs are concatenated.
TEST_F(ComputeLoopTest, OutOfMemoryIsRetriedAsTwoHalves) {
  std::string path = Save("Double", "def forward(self, x):\n    return x * 2.0\n");
  ASSERT_EQ(Start(path, 1 << 20, "cpu", "oom@1,oom@2").state, LoadState::kLoaded);
  at::Tensor x = torch::arange(12, torch::kFloat32).reshape({6, 2});
  Submit(1, {x});
  Response r = Await();
  ASSERT_EQ(r.status, Code(StatusCode::kOk)) << r.message;
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(torch::equal(r.outputs[0], x * 2.0));
  // A single row cannot be split: the batch fails with RESOURCE_EXHAUSTED, the loop serves on.
  Submit(2, {torch::ones({1, 2})});
  r = Await();
  EXPECT_EQ(r.status, Code(StatusCode::kResourceExhausted));
  EXPECT_NE(r.message.find("out of memory"), std::string::npos) << r.message;
  Submit(3, {torch::ones({1, 2})});
  EXPECT_EQ(Await().status, Code(StatusCode::kOk));
}

// A sticky device error leaves the batch unanswered and ends the loop with the reason.
TEST_F(ComputeLoopTest, StickyDeviceErrorEndsTheLoopWithoutAnswering) {
  std::string path = Save("Double", "def forward(self, x):\n    return x * 2.0\n");
  ASSERT_EQ(Start(path, 1 << 20, "cuda:0", "fakegpu,sticky@2").state, LoadState::kLoaded);
  Submit(1, {torch::ones({1, 2})});
  EXPECT_EQ(Await().status, Code(StatusCode::kOk));
  Submit(2, {torch::ones({1, 2})});
  ASSERT_TRUE(loop_->JoinFor(std::chrono::seconds(10)));
  EXPECT_NE(loop_->fatal_device_error().find("illegal memory access"), std::string::npos);
  EXPECT_EQ(segment_->response_ring().Front(), nullptr) << "the failed batch must stay unanswered";
  EXPECT_NE(segment_->request_ring().Front(), nullptr) << "and stay in the request ring";
}

TEST_F(ComputeLoopTest, CudaDeviceWithoutCudaIsADeviceFailure) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA";
  std::string path = Save("Double", "def forward(self, x):\n    return x * 2.0\n");
  LoadReport report = Start(path, 1 << 20, "cuda:0");
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_TRUE(report.device_failure);
  EXPECT_NE(report.error.find("CUDA is not available"), std::string::npos) << report.error;
}

}  // namespace
}  // namespace torchfarm::worker
