// ComputeLoop on its own thread against a segment created in this process; the test plays the
// supervisor: it writes request slots, rings the request doorbell and reads the response ring.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "tests/worker/compute_loop_fixture.h"

namespace torchfarm::worker {
namespace {

TEST_F(ComputeLoopTest, MlpOutputEqualsDirectForward) {
  torch::manual_seed(1);
  std::string path = SaveMlp();
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

TEST_F(ComputeLoopTest, ARefusedBatchIsAnsweredWithItsErrorWithoutRunning) {
  std::string path = Save("Identity", "def forward(self, x):\n    return x\n");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  // What the supervisor writes for a batch its slot cannot hold (ipc/slot_codec.h).
  uint8_t* slot = segment_->request_ring().TryReserve();
  ASSERT_NE(slot, nullptr);
  ipc::WriteRefusal(4, ResourceExhausted("the batch's inputs need more; raise slot_bytes"), slot);
  segment_->request_ring().Publish();
  request_doorbell_.Ring();
  Response refused = Await();
  EXPECT_EQ(refused.batch_id, 4u);
  EXPECT_EQ(refused.status, Code(StatusCode::kResourceExhausted));
  EXPECT_EQ(refused.message, "the batch's inputs need more; raise slot_bytes");
  EXPECT_TRUE(refused.outputs.empty());
  EXPECT_EQ(loop_->stats().errors, 1u);
}

TEST_F(ComputeLoopTest, IdleSpinFindsTheNextRequestWithoutTheDoorbell) {
  idle_spin_us_ = 100'000;  // the most the config allows: a generous window on a loaded host
  std::string path = Save("Identity", "def forward(self, x):\n    return x\n");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  Submit(1, {torch::full({1}, 1.0f)});
  ASSERT_EQ(Await().status, Code(StatusCode::kOk));
  EXPECT_EQ(loop_->stats().spin_hits, 0u) << "the first request came through the doorbell";
  Submit(2, {torch::full({1}, 2.0f)}, /*ring=*/false);
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  EXPECT_EQ(response.outputs.at(0).item<float>(), 2.0f);
  // No doorbell rang for it: only polling found it. Usually the idle spin after the first answer
  // (a spin hit); on a loaded host the loop may still be draining the ring when it lands, which
  // finds it the same way without counting a spin hit.
  EXPECT_LE(loop_->stats().spin_hits, 1u);
  // Spinning never holds up a stop.
  loop_->RequestStop(StopMode::kAbandon);
  EXPECT_TRUE(loop_->JoinFor(std::chrono::seconds(5)));
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
  const std::string expected = BuiltWithCuda() ? "CUDA reports no usable device" : "not built with CUDA";
  EXPECT_NE(report.error.find(expected), std::string::npos) << report.error;
}

// bf16 on the CPU: parameters converted once, float32 in and out on the wire, results close to
// the float32 model's but not equal to them (the conversion really happened).
TEST_F(ComputeLoopTest, ReducedPrecisionModelAnswersInFloat32) {
  torch::manual_seed(3);
  std::string path = Save("Mlp", R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t()) + self.b2
)",
                          {{"w1", torch::randn({64, 32})},
                           {"b1", torch::randn({64})},
                           {"w2", torch::randn({8, 64})},
                           {"b2", torch::randn({8})}});
  precision_ = "bf16";
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  at::Tensor x = torch::randn({4, 32});
  Submit(7, {x});
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  ASSERT_EQ(response.outputs.size(), 1u);
  EXPECT_EQ(response.outputs[0].scalar_type(), c10::kFloat);
  at::Tensor expected = torch::jit::load(path).forward({x}).toTensor();
  EXPECT_TRUE(torch::allclose(response.outputs[0], expected, /*rtol=*/0.05, /*atol=*/0.5))
      << (response.outputs[0] - expected).abs().max().item<float>();
  EXPECT_FALSE(torch::equal(response.outputs[0], expected)) << "bf16 must round somewhere";
}

// Only floating tensors change type: an integer buffer (indices, position ids) keeps int64.
TEST_F(ComputeLoopTest, ReducedPrecisionKeepsIntegerBuffers) {
  torch::jit::Module module("Gather");
  module.register_parameter("scale", torch::full({3}, 0.5), false);
  module.register_buffer("columns", torch::tensor({2, 0, 1}, torch::kLong));
  module.define(R"(
def forward(self, x):
    return torch.index_select(x, 1, self.columns) * self.scale
)");
  const std::string path = (dir_ / "Gather.pt").string();
  module.save(path);
  precision_ = "bf16";
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  Submit(1, {torch::tensor({{1.0f, 2.0f, 4.0f}})});
  Response response = Await();
  ASSERT_EQ(response.status, Code(StatusCode::kOk)) << response.message;
  EXPECT_TRUE(torch::equal(response.outputs[0], torch::tensor({{2.0f, 0.5f, 1.0f}})))
      << response.outputs[0];
}

// Warm-up batches run before the load is reported, are not counted as served batches, and a
// warm-up that fails makes the load fail with the shapes it used.
TEST_F(ComputeLoopTest, WarmupRunsBeforeReadyAndItsFailureFailsTheLoad) {
  std::string path = Save("Rows", R"(
def forward(self, x):
    assert x.size(0) <= 8, "batch too large for this model"
    return x * 2.0
)");
  warmup_ = {{TensorSpec{DType::kFloat32, {1, 3}}}, {TensorSpec{DType::kFloat32, {8, 3}}}};
  LoadReport report = Start(path);
  ASSERT_EQ(report.state, LoadState::kLoaded) << report.error;
  EXPECT_GT(report.warmup_ms, 0.0);
  EXPECT_EQ(loop_->stats().batches, 0u) << "warm-up batches are not served batches";
  loop_.reset();
  segment_.reset();

  ++counter_;
  warmup_ = {{TensorSpec{DType::kFloat32, {16, 3}}}};
  report = Start(path);
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_FALSE(report.device_failure);
  EXPECT_NE(report.error.find("warm-up with inputs [float32 [16, 3]] failed"), std::string::npos)
      << report.error;
  EXPECT_NE(report.error.find("batch too large for this model"), std::string::npos) << report.error;
}

// The model's optimize setting is applied at load and serves the module's answers; a setting the
// worker does not know fails the load, and a warm-up that fails on an optimized model says which
// setting to try.
TEST_F(ComputeLoopTest, OptimizedModelServesTheSameAnswers) {
  torch::manual_seed(3);
  const std::string path = SaveMlp();
  const at::Tensor x = torch::randn({5, 16});
  const at::Tensor expected = torch::jit::load(path).forward({x}).toTensor();
  for (const char* optimize : {"freeze", "inference"}) {
    ++counter_;
    optimize_ = optimize;
    LoadReport report = Start(path);
    ASSERT_EQ(report.state, LoadState::kLoaded) << optimize << ": " << report.error;
    Submit(7, {x});
    Response response = Await();
    ASSERT_EQ(response.status, Code(StatusCode::kOk)) << optimize << ": " << response.message;
    ASSERT_EQ(response.outputs.size(), 1u);
    EXPECT_TRUE(torch::allclose(response.outputs[0], expected, 1e-4, 1e-5)) << optimize;
    loop_.reset();
    segment_.reset();
  }

  ++counter_;
  optimize_ = "fast";
  LoadReport report = Start(path);
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_EQ(report.error, "optimize: expected none, freeze or inference, got 'fast'");
  loop_.reset();
  segment_.reset();

  ++counter_;
  optimize_ = "freeze";
  warmup_ = {{TensorSpec{DType::kFloat32, {2, 5}}}};  // 5 columns where the model takes 16
  report = Start(path);
  EXPECT_EQ(report.state, LoadState::kFailed);
  EXPECT_NE(report.error.find("warm-up with inputs [float32 [2, 5]] failed"), std::string::npos)
      << report.error;
  EXPECT_NE(report.error.find("the model is optimized with \"freeze\": if it serves these "
                              "inputs as loaded, set optimize to \"none\""),
            std::string::npos)
      << report.error;
}

// The first warm-up batch's outputs are reported with the load (the "ready" message's
// "outputs"): what a reply would carry, so an int tuple element keeps its type.
TEST_F(ComputeLoopTest, WarmupReportsTheOutputsOfItsFirstBatch) {
  std::string path = Save("TwoOut", R"(
def forward(self, x):
    return (x * 2.0, x.sum(1).long())
)");
  warmup_ = {{TensorSpec{DType::kFloat32, {2, 3}}}, {TensorSpec{DType::kFloat32, {5, 3}}}};
  LoadReport report = Start(path);
  ASSERT_EQ(report.state, LoadState::kLoaded) << report.error;
  ASSERT_TRUE(report.warmup_outputs_known);
  EXPECT_EQ(report.warmup_outputs, (std::vector<TensorSpec>{TensorSpec{DType::kFloat32, {2, 3}},
                                                            TensorSpec{DType::kInt64, {2}}}));
  loop_.reset();
  segment_.reset();

  ++counter_;
  warmup_.clear();
  report = Start(path);
  ASSERT_EQ(report.state, LoadState::kLoaded) << report.error;
  EXPECT_FALSE(report.warmup_outputs_known) << "without a warm-up there is nothing to report";
}

// Stage times: on the CPU the forward and the copy into the response slot are timed by the host
// clock and summed over batches; the device report names the CPU.
TEST_F(ComputeLoopTest, StageTimesAndDeviceReportAreKept) {
  std::string path = Save("Slowish", R"(
def forward(self, x):
    y = x
    for i in range(200):
        y = torch.tanh(y + 0.01)
    return y
)");
  ASSERT_EQ(Start(path).state, LoadState::kLoaded);
  for (uint64_t id = 1; id <= 3; ++id) {
    Submit(id, {torch::randn({64, 256})});
    ASSERT_EQ(Await().status, Code(StatusCode::kOk));
  }
  ComputeStats stats = loop_->stats();
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_GT(stats.compute_us, 0u);
  EXPECT_EQ(stats.device.name, "cpu");
  EXPECT_EQ(stats.device.streams, 1);
  EXPECT_FALSE(stats.device.pinned);
  EXPECT_EQ(stats.device.memory_allocated, -1);
}

}  // namespace
}  // namespace torchfarm::worker
