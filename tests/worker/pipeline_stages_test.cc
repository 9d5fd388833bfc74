// The worker's pipeline stages (worker/pipeline_stages.h) inside a ComputeLoop, no processes: JPEG
// items of mixed sizes decoded and pre-processed into the model's batch, a corrupt item reported
// as a failed row (the others answered), prefetched batches answered in order with the outputs a
// direct computation gives, and preprocess without decode.

#include <random>

#include "../integration/jpeg_writer.h"
#include "common/bytes_items.h"
#include "compute_loop_fixture.h"
#include "worker/image_decoder.h"

namespace torchfarm::worker {
namespace {

using ::torchfarm::testing::NoiseJpeg;

constexpr const char* kPre = R"(
def forward(self, image):
    x = image.permute(2, 0, 1).unsqueeze(0).float() / 255.0
    return torch.upsample_bilinear2d(x, [8, 8], False, None, None)[0]
)";
constexpr const char* kModel = R"(
def forward(self, x):
    return x.mean([2, 3])
)";
constexpr const char* kPost = R"(
def forward(self, x):
    return (x * 2.0, x.argmax(1))
)";

class PipelineStagesTest : public ComputeLoopTest {
 protected:
  // Submits `items` as one bytes input of a batch (the supervisor's concatenated requests).
  void SubmitItems(uint64_t batch_id, const std::vector<std::string>& items) {
    std::string buffer;
    for (const std::string& item : items) AppendBytesItem(item, &buffer);
    uint8_t* slot = segment_->request_ring().TryReserve();
    ASSERT_NE(slot, nullptr);
    ipc::RequestBatch batch;
    batch.batch_id = batch_id;
    ipc::RequestInput input;
    input.spec = TensorSpec{DType::kBytes, {static_cast<int64_t>(items.size())}};
    input.parts.push_back(
        ipc::TensorPart{reinterpret_cast<const uint8_t*>(buffer.data()), buffer.size(), false});
    batch.inputs.push_back(input);
    ASSERT_TRUE(ipc::WriteRequest(batch, slot, segment_->data_capacity(), nullptr).ok());
    segment_->request_ring().Publish();
    request_doorbell_.Ring();
  }

  // What the stages give for one image: decode, pre, model, post in this process.
  at::Tensor Expected(const std::string& jpeg) {
    at::Tensor image;
    EXPECT_TRUE(DecodeJpeg(jpeg, &image).ok());
    torch::jit::Module pre = torch::jit::load(pre_path_), model = torch::jit::load(model_path_);
    at::Tensor x = pre.forward({image}).toTensor().unsqueeze(0);
    return model.forward({x}).toTensor() * 2.0;
  }

  void Configure() {
    pre_path_ = Save("Pre", kPre);
    model_path_ = Save("Model", kModel);
    pipeline_.decode_format = "jpeg";
    pipeline_.threads = 2;
    pipeline_.preprocess = pre_path_;
    pipeline_.postprocess = Save("Post", kPost);
  }

  std::string pre_path_, model_path_;
};

TEST_F(PipelineStagesTest, MixedSizesAreDecodedPreprocessedAndAnsweredPerRow) {
  Configure();
  ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
  const std::vector<std::string> jpegs = {NoiseJpeg(20, 10, 1), NoiseJpeg(9, 31, 2), NoiseJpeg(16, 16, 3)};
  SubmitItems(1, jpegs);
  Response r = Await();
  ASSERT_EQ(r.status, 0) << r.message;
  ASSERT_EQ(r.outputs.size(), 2u);
  ASSERT_EQ(r.outputs[0].sizes(), (std::vector<int64_t>{3, 3}));
  for (size_t k = 0; k < jpegs.size(); ++k) {
    EXPECT_TRUE(
        torch::allclose(r.outputs[0][static_cast<int64_t>(k)], Expected(jpegs[k])[0], 1e-5, 1e-6))
        << "row " << k;
  }
}

TEST_F(PipelineStagesTest, ACorruptItemIsAFailedRowAndTheOthersAreAnswered) {
  Configure();
  ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
  const std::string good = NoiseJpeg(12, 12, 4);
  SubmitItems(2, {good, "\xff\xd8 not a jpeg", good});
  const ipc::SpscRing ring = segment_->response_ring();
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (ring.Front() == nullptr && std::chrono::steady_clock::now() < deadline) {
    response_doorbell_.Wait(100);
    response_doorbell_.Drain();
  }
  ASSERT_NE(ring.Front(), nullptr);
  ipc::ResponseExpectation expected;
  expected.batch_id = 2;
  expected.data_capacity = segment_->data_capacity();
  expected.total_rows = 3;
  ipc::ResponseView view;
  Status s = ipc::ReadResponse(ring.Front(), expected, &view);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(view.has_pipeline);
  ASSERT_EQ(view.pipeline.row_failures.size(), 1u);
  EXPECT_EQ(view.pipeline.row_failures[0].row, 1);
  EXPECT_EQ(view.pipeline.row_failures[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_GE(view.pipeline.decode_us, 0);
  EXPECT_GE(view.pipeline.preprocess_us, 0);
  EXPECT_GE(view.pipeline.postprocess_us, 0);
  ASSERT_EQ(view.outputs.size(), 2u);
  EXPECT_EQ(view.outputs[0].shape, (std::vector<int64_t>{3, 3}));
  ring.Pop();
  // Every item corrupt: nothing runs, each row says why.
  SubmitItems(3, {"junk", ""});
  Response r = Await();
  EXPECT_EQ(r.status, 0) << r.message;
  EXPECT_TRUE(r.outputs.empty());
}

TEST_F(PipelineStagesTest, PrefetchedBatchesAreAnsweredInOrderWithOrWithoutOverlap) {
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    Configure();
    pipeline_.overlap = overlap;
    ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
    std::vector<std::string> jpegs;
    for (unsigned k = 0; k < 4; ++k) jpegs.push_back(NoiseJpeg(10 + 3 * k, 14, 10 + k));
    for (uint64_t b = 0; b < 4; ++b) SubmitItems(100 + b, {jpegs[b]});  // the ring holds 4
    for (uint64_t b = 0; b < 4; ++b) {
      Response r = Await();
      ASSERT_EQ(r.status, 0) << r.message;
      EXPECT_EQ(r.batch_id, 100 + b);
      ASSERT_EQ(r.outputs.size(), 2u);
      EXPECT_TRUE(torch::allclose(r.outputs[0], Expected(jpegs[b]), 1e-5, 1e-6));
    }
    loop_.reset();
    segment_.reset();
  }
}

TEST_F(PipelineStagesTest, PreprocessWithoutDecodeRunsOnEachRowOfTheInput) {
  model_path_ = Save("Model", kModel);
  pipeline_.preprocess = Save("Pre", kPre);
  ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
  at::Tensor images = torch::randint(0, 255, {2, 5, 7, 3}, at::TensorOptions().dtype(at::kByte));
  Submit(7, {images});
  Response r = Await();
  ASSERT_EQ(r.status, 0) << r.message;
  ASSERT_EQ(r.outputs.size(), 1u);
  torch::jit::Module pre = torch::jit::load(pipeline_.preprocess);
  for (int64_t k = 0; k < 2; ++k) {
    at::Tensor x = pre.forward({images[k]}).toTensor();
    EXPECT_TRUE(torch::allclose(r.outputs[0][k], x.mean({1, 2}), 1e-5, 1e-6));
  }
}

TEST(ImageDecoderTest, CorruptAndOversizedJpegsAreNamed) {
  at::Tensor image;
  EXPECT_EQ(DecodeJpeg("", &image).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(DecodeJpeg("GIF89a", &image).message().find("not a JPEG"), std::string::npos);
  Status junk = DecodeJpeg("\xff\xd8garbage", &image);
  EXPECT_EQ(junk.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(junk.message().find("corrupt JPEG"), std::string::npos) << junk.message();
  const std::string good = NoiseJpeg(6, 4, 9);
  ASSERT_TRUE(DecodeJpeg(good, &image).ok());
  EXPECT_EQ(image.sizes(), (std::vector<int64_t>{4, 6, 3}));
  EXPECT_EQ(image.scalar_type(), at::kByte);
  Status truncated = DecodeJpeg(good.substr(0, good.size() / 2), &image);
  EXPECT_EQ(truncated.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.message().find("JPEG"), std::string::npos) << truncated.message();
}

}  // namespace
}  // namespace torchfarm::worker
