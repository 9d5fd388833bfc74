// The worker's compute loop on a real CUDA device: several streams in flight, fp16, the ring
// segment registered for DMA, stage times from CUDA events and the caching allocator's counters.
// Every test skips (GTEST_SKIP) when this worker was built without CUDA or no device is visible,
// so the CPU build compiles and runs the file (label gpu; tools/gpu-check.sh runs it on a GPU).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "tests/worker/compute_loop_fixture.h"
#include "worker/accelerator.h"

namespace torchfarm::worker {
namespace {

class GpuComputeLoopTest : public ComputeLoopTest {
 protected:
  void SetUp() override {
    if (!BuiltWithCuda()) GTEST_SKIP() << "torchfarm-worker was built without CUDA";
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible";
    ComputeLoopTest::SetUp();
  }

  std::string SaveMlp() {
    torch::manual_seed(11);
    return Save("Mlp", R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t()) + self.b2
)",
                {{"w1", torch::randn({512, 256}) * 0.05},
                 {"b1", torch::randn({512}) * 0.05},
                 {"w2", torch::randn({128, 512}) * 0.05},
                 {"b2", torch::randn({128}) * 0.05}});
  }
};

// Four batches submitted back to back on two streams come back in ring order, each equal (within
// fp16 rounding) to the float32 model on the CPU, in float32.
TEST_F(GpuComputeLoopTest, Fp16OnTwoStreamsAnswersInOrderAndMatchesTheCpu) {
  const std::string path = SaveMlp();
  precision_ = "fp16";
  accelerator_.streams = 2;
  warmup_ = {{TensorSpec{DType::kFloat32, {8, 256}}}};
  LoadReport report = Start(path, 1 << 20, "cuda:0");
  ASSERT_EQ(report.state, LoadState::kLoaded) << report.error;
  torch::jit::Module reference = torch::jit::load(path);
  std::vector<at::Tensor> inputs;
  for (uint64_t id = 0; id < 4; ++id) {
    inputs.push_back(torch::randn({8 + static_cast<int64_t>(id), 256}));
    Submit(100 + id, {inputs.back()});
  }
  for (uint64_t id = 0; id < 4; ++id) {
    Response response = Await();
    ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
    EXPECT_EQ(response.batch_id, 100 + id) << "responses must follow ring order";
    ASSERT_EQ(response.outputs.size(), 1u);
    EXPECT_EQ(response.outputs[0].scalar_type(), c10::kFloat);
    at::Tensor expected = reference.forward({inputs[id]}).toTensor();
    EXPECT_TRUE(torch::allclose(response.outputs[0], expected, 2e-2, 2e-2))
        << (response.outputs[0] - expected).abs().max().item<float>();
  }
  ComputeStats stats = loop_->stats();
  EXPECT_EQ(stats.batches, 4u);
  EXPECT_EQ(stats.device.streams, 2);
  EXPECT_TRUE(stats.device.pinned) << "the ring segment must be registered for DMA";
  EXPECT_GT(stats.device.memory_allocated, 0);
  EXPECT_GE(stats.device.memory_reserved, stats.device.memory_allocated);
  EXPECT_GT(stats.compute_us, 0u);
  EXPECT_GT(stats.h2d_us + stats.d2h_us, 0u);
}

// fp32 on the GPU, not pinned: the pageable path gives the same numbers.
TEST_F(GpuComputeLoopTest, Fp32UnpinnedMatchesTheCpu) {
  const std::string path = SaveMlp();
  accelerator_.pin_memory = false;
  ASSERT_EQ(Start(path, 1 << 20, "cuda:0").state, LoadState::kLoaded);
  at::Tensor x = torch::randn({32, 256});
  Submit(1, {x});
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  at::Tensor expected = torch::jit::load(path).forward({x}).toTensor();
  EXPECT_TRUE(torch::allclose(response.outputs[0], expected, 1e-3, 1e-3));
  EXPECT_FALSE(loop_->stats().device.pinned);
}

// A model error on the device fails only its batch; the next batch on the other stream is fine.
TEST_F(GpuComputeLoopTest, ModelErrorFailsOnlyItsBatch) {
  std::string path = Save("Picky", R"(
def forward(self, x):
    assert x.size(0) != 3, "three rows are not allowed"
    return x * 2.0
)");
  accelerator_.streams = 2;
  ASSERT_EQ(Start(path, 1 << 20, "cuda:0").state, LoadState::kLoaded);
  Submit(1, {torch::ones({3, 4})});
  Submit(2, {torch::ones({2, 4})});
  Response first = Await();
  EXPECT_EQ(first.status, Code(StatusCode::kInternal));
  EXPECT_NE(first.message.find("three rows are not allowed"), std::string::npos) << first.message;
  Response second = Await();
  ASSERT_EQ(second.status, Code(StatusCode::kOk)) << second.message;
  EXPECT_TRUE(torch::equal(second.outputs[0], torch::full({2, 4}, 2.0)));
}

// A device index that does not exist is a device failure naming how many devices there are.
TEST_F(GpuComputeLoopTest, MissingDeviceIsADeviceFailure) {
  std::string path = Save("Double", "def forward(self, x):\n    return x * 2.0\n");
  LoadReport report = Start(path, 1 << 20, "cuda:" + std::to_string(torch::cuda::device_count()));
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_TRUE(report.device_failure);
  EXPECT_NE(report.error.find("CUDA device(s) are visible"), std::string::npos) << report.error;
}

}  // namespace
}  // namespace torchfarm::worker
