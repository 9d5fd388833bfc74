// The worker's pipeline stages (worker/pipeline_stages.h) inside a ComputeLoop, no processes: JPEG
// items of mixed sizes decoded and pre-processed into the model's batch, a corrupt item reported
// as a failed row (the others answered), prefetched batches answered in order with the outputs a
// direct computation gives, and preprocess without decode. Recovery: every kind of bad item, a
// preprocess and a model that throw, each followed by good batches (prefetched, with overlap on
// and off) answered with the values a direct computation gives.

#include <gmock/gmock.h>

#include <random>
#include <thread>

#include "../integration/bad_jpegs.h"
#include "../integration/jpeg_writer.h"
#include "common/bytes_items.h"
#include "compute_loop_fixture.h"
#include "worker/image_decoder.h"
#include "worker/jpeg_decoder.h"

namespace torchfarm::worker {
namespace {

using ::testing::HasSubstr;
using ::torchfarm::testing::BadJpeg;
using ::torchfarm::testing::BadJpegs;
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
    // The worker pops a request slot just after publishing its response: wait for it.
    uint8_t* slot = nullptr;
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    while ((slot = segment_->request_ring().TryReserve()) == nullptr &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
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

  // The oldest response, read as a pipeline batch of `rows` rows, then popped.
  struct PipelineAnswer {
    Status status = Internal("no response arrived in time");
    std::vector<ipc::RowFailure> failures;
    std::vector<at::Tensor> outputs;
  };
  PipelineAnswer AwaitPipeline(uint64_t batch_id, int64_t rows) {
    PipelineAnswer answer;
    const ipc::SpscRing ring = segment_->response_ring();
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    while (ring.Front() == nullptr) {
      if (std::chrono::steady_clock::now() > deadline) return answer;
      response_doorbell_.Wait(100);
      response_doorbell_.Drain();
    }
    ipc::ResponseExpectation expected;
    expected.batch_id = batch_id;
    expected.data_capacity = segment_->data_capacity();
    expected.total_rows = rows;
    ipc::ResponseView view;
    answer.status = ipc::ReadResponse(ring.Front(), expected, &view);
    if (answer.status.ok()) {
      answer.failures = view.pipeline.row_failures;
      for (size_t i = 0; i < view.outputs.size(); ++i) {
        auto* bytes = const_cast<uint8_t*>(view.data + view.offsets[i]);
        answer.outputs.push_back(
            torch::from_blob(bytes, view.outputs[i].shape,
                             at::TensorOptions().dtype(ToScalarType(view.outputs[i].dtype)))
                .clone());
      }
    }
    ring.Pop();
    return answer;
  }

  // Checks an answered batch: `failed` its only failed rows (INVALID_ARGUMENT, saying `says`), and
  // every other row k equal to `want[k]` (Expected of its image).
  static void CheckAnswer(const PipelineAnswer& answer, const std::vector<int64_t>& failed,
                          const std::string& says, const std::vector<at::Tensor>& want) {
    ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
    ASSERT_EQ(answer.failures.size(), failed.size());
    for (size_t k = 0; k < failed.size(); ++k) {
      EXPECT_EQ(answer.failures[k].row, failed[k]);
      EXPECT_EQ(answer.failures[k].status.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(answer.failures[k].status.message(), HasSubstr(says));
    }
    if (failed.size() == want.size()) {
      EXPECT_TRUE(answer.outputs.empty());  // every row failed: nothing ran
      return;
    }
    ASSERT_EQ(answer.outputs.size(), 2u);
    for (size_t row = 0; row < want.size(); ++row) {
      if (std::find(failed.begin(), failed.end(), static_cast<int64_t>(row)) != failed.end()) {
        continue;
      }
      EXPECT_TRUE(
          torch::allclose(answer.outputs[0][static_cast<int64_t>(row)], want[row][0], 1e-5, 1e-6))
          << "row " << row;
    }
  }

  // What the stages give for one image: decode, pre, model, post in this process.
  at::Tensor Expected(const std::string& jpeg) {
    at::Tensor image;
    EXPECT_TRUE(DecodeJpeg(jpeg, kDefaultDecodeMaxPixels, &image).ok());
    torch::jit::Module pre = torch::jit::load(pre_path_), model = torch::jit::load(model_path_);
    at::Tensor x = pre.forward({image}).toTensor().unsqueeze(0);
    return model.forward({x}).toTensor() * 2.0;
  }

  void Configure(const char* pre = kPre, const char* model = kModel) {
    pre_path_ = Save("Pre", pre);
    model_path_ = Save("Model", model);
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

TEST(ImageDecoderTest, AGoodJpegBecomesAnRgbTensorAndABadOneLeavesNone) {
  at::Tensor image = torch::ones({2});
  Status junk = DecodeJpeg("\xff\xd8garbage", kDefaultDecodeMaxPixels, &image);
  EXPECT_EQ(junk.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(junk.message(), HasSubstr("corrupt JPEG header: "));
  EXPECT_FALSE(image.defined());
  const std::string good = NoiseJpeg(6, 4, 9);
  ASSERT_TRUE(DecodeJpeg(good, kDefaultDecodeMaxPixels, &image).ok());
  EXPECT_EQ(image.sizes(), (std::vector<int64_t>{4, 6, 3}));
  EXPECT_EQ(image.scalar_type(), at::kByte);
  EXPECT_TRUE(image.is_contiguous());
  std::vector<uint8_t> rgb;
  int width = 0, height = 0;
  ASSERT_TRUE(DecodeJpegRgb(good, kDefaultDecodeMaxPixels, &rgb, &width, &height).ok());
  EXPECT_EQ(std::vector<uint8_t>(image.data_ptr<uint8_t>(), image.data_ptr<uint8_t>() + rgb.size()),
            rgb);
  Status over = DecodeJpeg(good, 23, &image);
  EXPECT_EQ(over.message(), "JPEG of 6x4 = 24 pixels; at most 23 (decode.max_pixels)");
  EXPECT_FALSE(image.defined());
}

// Each bad kind alone, among good items, then two good batches; the ring holds 4, so each batch's
// successor is prefetched while it runs (overlap on).
TEST_F(PipelineStagesTest, EveryBadItemFailsOnlyItsRowAndTheNextBatchesAreAnswered) {
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    Configure();
    pipeline_.overlap = overlap;
    ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
    const std::string a = NoiseJpeg(12, 12, 4), b = NoiseJpeg(20, 9, 6);
    const at::Tensor want_a = Expected(a), want_b = Expected(b);
    uint64_t id = 1000;
    for (int round = 0; round < 3; ++round) {
      for (const BadJpeg& bad : BadJpegs(pipeline_.max_pixels)) {
        SCOPED_TRACE(bad.name + ", round " + std::to_string(round));
        SubmitItems(id, {bad.bytes});
        SubmitItems(id + 1, {a, bad.bytes, b});
        SubmitItems(id + 2, {b, a, a});
        SubmitItems(id + 3, {a});
        CheckAnswer(AwaitPipeline(id, 1), {0}, bad.says, {at::Tensor()});
        CheckAnswer(AwaitPipeline(id + 1, 3), {1}, bad.says, {want_a, at::Tensor(), want_b});
        CheckAnswer(AwaitPipeline(id + 2, 3), {}, "", {want_b, want_a, want_a});
        CheckAnswer(AwaitPipeline(id + 3, 1), {}, "", {want_a});
        id += 4;
      }
    }
    loop_.reset();
    segment_.reset();
  }
}

// A preprocess that throws on 13-wide images fails that row; a model that throws on batches of 3
// fails that batch (INTERNAL); the batches after each are answered, prefetched or not.
TEST_F(PipelineStagesTest, APreprocessOrModelThatThrowsFailsOnlyItsOwnRowOrBatch) {
  constexpr const char* kPickyPre = R"(
def forward(self, image):
    assert image.size(1) != 13, "no 13-wide images"
    x = image.permute(2, 0, 1).unsqueeze(0).float() / 255.0
    return torch.upsample_bilinear2d(x, [8, 8], False, None, None)[0]
)";
  constexpr const char* kPickyModel = R"(
def forward(self, x):
    assert x.size(0) != 3, "no batches of 3"
    return x.mean([2, 3])
)";
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    Configure(kPickyPre, kPickyModel);
    pipeline_.overlap = overlap;
    ASSERT_EQ(Start(model_path_).state, LoadState::kLoaded);
    const std::string a = NoiseJpeg(12, 12, 4), b = NoiseJpeg(20, 9, 6), wide = NoiseJpeg(13, 5, 1);
    const at::Tensor want_a = Expected(a), want_b = Expected(b);
    for (uint64_t id = 1; id < 20; id += 4) {
      SubmitItems(id, {a, wide});
      SubmitItems(id + 1, {a, b, a});
      SubmitItems(id + 2, {b, a});
      SubmitItems(id + 3, {b});
      CheckAnswer(AwaitPipeline(id, 2), {1}, "preprocess failed: ", {want_a, at::Tensor()});
      PipelineAnswer thrown = AwaitPipeline(id + 1, 3);
      EXPECT_EQ(thrown.status.code(), StatusCode::kInternal) << thrown.status.ToString();
      EXPECT_THAT(thrown.status.message(), HasSubstr("no batches of 3"));
      CheckAnswer(AwaitPipeline(id + 2, 2), {}, "", {want_b, want_a});
      CheckAnswer(AwaitPipeline(id + 3, 1), {}, "", {want_b});
    }
    loop_.reset();
    segment_.reset();
  }
}

}  // namespace
}  // namespace torchfarm::worker
