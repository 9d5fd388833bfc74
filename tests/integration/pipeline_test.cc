// The worker's image pipeline end to end (worker/pipeline_stages.h): a real supervisor and worker
// serving convnet behind decode (JPEG) + jpeg_pre + topk_post (tools/mkmodel.cc), fed JPEGs of
// mixed sizes that the test writes with libturbojpeg's compressor.
//   - outputs allclose to decode + pre + model + post in PyTorch on the same bytes
//     (pipeline_reference.py run by TORCHFARM_PYTHON; skipped without torch);
//   - a corrupt JPEG among 8 requests: 7 answers, 1 INVALID_ARGUMENT naming the item;
//   - stage times in the reply's timing_us and in stats;
//   - recovery, with overlap on (the default) and off: every kind of bad item (bad_jpegs.h), alone,
//     among good items of its request and among pipelined good requests, fails only its request
//     with INVALID_ARGUMENT naming the item; then 200 good requests on the same worker are all
//     answered with the values they had before (the decoder once kept a failed header's state).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bad_jpegs.h"
#include "common/bytes_items.h"
#include "common/npy.h"
#include "common/pipeline_config.h"
#include "farm_fixture.h"
#include "jpeg_writer.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A width x height RGB picture (smooth gradients and a little noise, as photos are) compressed
// at quality 90.
std::string WriteJpeg(int width, int height, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      unsigned char* p = &pixels[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<unsigned char>((x * 255) / width);
      p[1] = static_cast<unsigned char>((y * 255) / height);
      p[2] = static_cast<unsigned char>(128 + 60 * std::sin((x + y + seed) * 0.3) +
                                        static_cast<int>(random() % 20));
    }
  }
  return EncodeJpeg(pixels, width, height);
}

json ImageModel(bool overlap = true) {
  json model = {{"name", "img"},
                {"path", ModelDir() + "/convnet.pt"},
                {"inputs", json::array({{{"dtype", "bytes"}, {"shape", {-1}}}})},
                {"max_batch_size", 8},
                {"max_queue_delay_us", 20'000},
                {"pipeline",
                 {{"decode", {{"format", "jpeg"}, {"threads", 2}}},
                  {"preprocess", ModelDir() + "/jpeg_pre.pt"},
                  {"postprocess", ModelDir() + "/topk_post.pt"}}},
                {"instances", json::array({{{"device", "cpu"}, {"count", 1}}})}};
  if (!overlap) model["pipeline"]["overlap"] = false;  // else the documented default (true)
  return model;
}

TensorView ItemsView(const std::string& items, int64_t count) {
  return TensorView(TensorSpec{DType::kBytes, {count}}, items.data(), items.size());
}

std::vector<std::string> MixedJpegs() {
  const int sizes[][2] = {{40, 30}, {64, 48}, {33, 57}, {32, 32}, {100, 20}, {17, 90}};
  std::vector<std::string> jpegs;
  for (unsigned k = 0; k < 6; ++k) jpegs.push_back(WriteJpeg(sizes[k][0], sizes[k][1], k));
  return jpegs;
}

std::vector<float> Floats(const std::string& data) {
  std::vector<float> out(data.size() / sizeof(float));
  std::memcpy(out.data(), data.data(), out.size() * sizeof(float));
  return out;
}

TEST(PipelineTest, OutputsEqualDecodePreModelPostInPyTorchOnTheSameBytes) {
  Farm farm(json::array({ImageModel()}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::vector<std::string> jpegs = MixedJpegs();
  std::string items;
  std::string args;
  for (size_t k = 0; k < jpegs.size(); ++k) {
    AppendBytesItem(jpegs[k], &items);
    const std::string path = farm.dir() + "/img" + std::to_string(k) + ".jpg";
    std::ofstream(path, std::ios::binary) << jpegs[k];
    args += " " + path;
  }
  Client client(farm.endpoint(), 30'000);
  InferResult result;
  Status s = client.Infer("img", {ItemsView(items, static_cast<int64_t>(jpegs.size()))}, &result);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(result.outputs.size(), 2u);
  const int64_t n = static_cast<int64_t>(jpegs.size());
  EXPECT_EQ(result.outputs[0].spec, (TensorSpec{DType::kFloat32, {n, 3}}));
  EXPECT_EQ(result.outputs[1].spec, (TensorSpec{DType::kInt64, {n, 3}}));
  EXPECT_GE(result.header.timing.decode_us, 0);
  EXPECT_GE(result.header.timing.preprocess_us, 0);
  EXPECT_GE(result.header.timing.postprocess_us, 0);

  const std::string script = std::string(TORCHFARM_TEST_SOURCE_DIR) + "/pipeline_reference.py";
  const int rc = std::system((std::string(TORCHFARM_PYTHON) + " " + script + " " + ModelDir() +
                              " " + farm.dir() + args + " > " + farm.dir() + "/reference.log 2>&1")
                                 .c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
    GTEST_SKIP() << TORCHFARM_PYTHON << " cannot import torch and torchvision "
                 << "(tools/install-deps.sh, or --models for Debian's): no reference";
  }
  ASSERT_EQ(rc, 0) << "pipeline_reference.py failed; see " << farm.dir() << "/reference.log";
  TensorSpec spec;
  std::string values, classes;
  ASSERT_TRUE(ReadNpy(farm.dir() + "/ref_values.npy", &spec, &values).ok());
  ASSERT_EQ(spec, result.outputs[0].spec);
  ASSERT_TRUE(ReadNpy(farm.dir() + "/ref_classes.npy", &spec, &classes).ok());
  ASSERT_EQ(spec, result.outputs[1].spec);
  EXPECT_EQ(result.outputs[1].data, classes) << "top-3 classes differ from PyTorch's";
  const std::vector<float> got = Floats(result.outputs[0].data), want = Floats(values);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i])) << "value " << i;
  }
}

TEST(PipelineTest, ACorruptJpegAmongEightRequestsFailsOnlyItsOwn) {
  Farm farm(json::array({ImageModel()}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::vector<std::string> jpegs = MixedJpegs();
  jpegs.push_back(WriteJpeg(50, 50, 7));
  jpegs.push_back(WriteJpeg(20, 60, 8));
  constexpr size_t kCorrupt = 5;
  jpegs[kCorrupt] = jpegs[kCorrupt].substr(0, 2) + std::string(300, '\x5a');  // SOI, then junk
  std::vector<std::string> frames(8);
  Client client(farm.endpoint(), 30'000);
  std::vector<uint64_t> ids(8);
  for (size_t k = 0; k < 8; ++k) {
    AppendBytesItem(jpegs[k], &frames[k]);
    ASSERT_TRUE(client.Send("img", {ItemsView(frames[k], 1)}, InferOptions{}, &ids[k]).ok());
  }
  int ok = 0, invalid = 0;
  for (size_t k = 0; k < 8; ++k) {
    uint64_t id = 0;
    InferResult result;
    Status s = client.Receive(&result, &id, 30'000);
    const size_t index = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
    ASSERT_LT(index, ids.size()) << s.ToString();
    if (index == kCorrupt) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_THAT(s.message(), HasSubstr("inputs[0] item 0: "));
      EXPECT_THAT(s.message(), HasSubstr("JPEG"));
      ++invalid;
    } else {
      EXPECT_TRUE(s.ok()) << "request " << index << ": " << s.ToString();
      ASSERT_EQ(result.outputs.size(), 2u);
      EXPECT_EQ(result.outputs[0].spec, (TensorSpec{DType::kFloat32, {1, 3}}));
      ok += s.ok() ? 1 : 0;
    }
  }
  EXPECT_EQ(ok, 7);
  EXPECT_EQ(invalid, 1);
  // One request of three images whose last is corrupt: the request fails naming that item.
  std::string three;
  for (size_t k : {size_t{0}, size_t{1}, kCorrupt}) AppendBytesItem(jpegs[k], &three);
  InferResult result;
  Status s = client.Infer("img", {ItemsView(three, 3)}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("inputs[0] item 2: "));
  const json stats = farm.Admin("stats");
  ASSERT_FALSE(stats.is_null());
  const std::string text = stats.dump();
  EXPECT_THAT(text, HasSubstr("\"decode\""));
  EXPECT_THAT(text, HasSubstr("\"preprocess\""));
}

// A request with more bad items than a reply slot reports (ipc::kMaxRowErrors) fails the whole
// batch on the worker: the supervisor runs each request of that batch again alone, so only the
// request at fault fails and the good requests batched with it succeed.
TEST(PipelineTest, ARequestOfManyBadItemsFailsOnlyItselfNotItsBatchMates) {
  Farm farm(json::array({ImageModel()}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::vector<std::string> jpegs = MixedJpegs();
  const std::string corrupt = jpegs[0].substr(0, 2) + std::string(300, '\x5a');
  std::string bad;
  for (int k = 0; k < 6; ++k) AppendBytesItem(k == 2 ? jpegs[1] : corrupt, &bad);
  Client client(farm.endpoint(), 30'000);
  uint64_t bad_id = 0;
  ASSERT_TRUE(client.Send("img", {ItemsView(bad, 6)}, InferOptions{}, &bad_id).ok());
  std::vector<std::string> good(3);
  std::vector<uint64_t> good_ids(3);
  for (size_t k = 0; k < good.size(); ++k) {
    AppendBytesItem(jpegs[k + 2], &good[k]);
    ASSERT_TRUE(client.Send("img", {ItemsView(good[k], 1)}, InferOptions{}, &good_ids[k]).ok());
  }
  int ok = 0;
  for (size_t n = 0; n < 1 + good.size(); ++n) {
    uint64_t id = 0;
    InferResult result;
    Status s = client.Receive(&result, &id, 30'000);
    if (id == bad_id) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_THAT(s.message(), HasSubstr("JPEG"));
    } else {
      ASSERT_NE(std::find(good_ids.begin(), good_ids.end(), id), good_ids.end()) << s.ToString();
      EXPECT_TRUE(s.ok()) << "a good request batched with the bad one: " << s.ToString();
      ok += s.ok() ? 1 : 0;
    }
  }
  EXPECT_EQ(ok, 3);
  EXPECT_EQ(farm.Admin("stats")["workers"][0]["restarts"], 0);
}

TEST(PipelineTest, AnItemOverMaxItemBytesIsRefusedAtIntake) {
  Farm farm(json::array({ImageModel()}), {{"limits", {{"max_item_bytes", 1000}}}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::string items;
  AppendBytesItem(std::string(1001, '\xff'), &items);
  Client client(farm.endpoint(), 30'000);
  InferResult result;
  Status s = client.Infer("img", {ItemsView(items, 1)}, &result);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("(limits.max_item_bytes)"));
}

// What a good request answered before any bad item: its two outputs' bytes.
struct GoodAnswer {
  std::string values;   // float32 [1, 3]
  std::string classes;  // int64 [1, 3]
};

void ExpectSameAnswer(const InferResult& result, const GoodAnswer& want, const std::string& what) {
  ASSERT_EQ(result.outputs.size(), 2u) << what;
  EXPECT_EQ(result.outputs[1].data, want.classes) << what << ": other top-3 classes";
  const std::vector<float> got = Floats(result.outputs[0].data), expected = Floats(want.values);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    // Batched with other requests: the same arithmetic up to the order of a few float sums.
    EXPECT_NEAR(got[i], expected[i], 1e-6 + 1e-5 * std::abs(expected[i])) << what << " value " << i;
  }
}

class PipelineRecoveryTest : public ::testing::TestWithParam<bool> {
 protected:
  // Sends `items[k]` (one encoded request frame each) pipelined, at most kWindow outstanding, and
  // returns each request's status and result in send order.
  static void SendAll(Client& client, const std::vector<const std::string*>& items,
                      std::vector<Status>* statuses, std::vector<InferResult>* results) {
    constexpr size_t kWindow = 48;  // under limits.max_queued_per_client (256)
    statuses->assign(items.size(), Internal("no reply"));
    results->assign(items.size(), InferResult{});
    std::vector<uint64_t> ids(items.size());
    size_t sent = 0, received = 0;
    while (received < items.size()) {
      while (sent < items.size() && sent - received < kWindow) {
        ASSERT_TRUE(
            client.Send("img", {ItemsView(*items[sent], 1)}, InferOptions{}, &ids[sent]).ok());
        ++sent;
      }
      uint64_t id = 0;
      InferResult result;
      Status s = client.Receive(&result, &id, 30'000);
      const auto index =
          static_cast<size_t>(std::find(ids.begin(), ids.begin() + sent, id) - ids.begin());
      ASSERT_LT(index, sent) << "a reply to no request of this test: " << s.ToString();
      (*statuses)[index] = s;
      (*results)[index] = std::move(result);
      ++received;
    }
  }
};

TEST_P(PipelineRecoveryTest, EveryBadItemFailsOnlyItsRequestAndTwoHundredGoodOnesFollow) {
  Farm farm(json::array({ImageModel(/*overlap=*/GetParam())}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::vector<pid_t> workers = farm.WorkerPids();
  Client client(farm.endpoint(), 30'000);
  const std::vector<std::string> goods = MixedJpegs();
  std::vector<std::string> good_frames(goods.size());
  std::vector<GoodAnswer> want(goods.size());
  for (size_t k = 0; k < goods.size(); ++k) {
    AppendBytesItem(goods[k], &good_frames[k]);
    InferResult result;
    Status s = client.Infer("img", {ItemsView(good_frames[k], 1)}, &result);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(result.outputs.size(), 2u);
    want[k] = GoodAnswer{result.outputs[0].data, result.outputs[1].data};
  }
  for (const BadJpeg& bad : BadJpegs(kDefaultDecodeMaxPixels)) {
    SCOPED_TRACE(bad.name);
    std::string alone, among;
    AppendBytesItem(bad.bytes, &alone);
    for (const std::string* item : {&goods[0], &bad.bytes, &goods[1]}) {
      AppendBytesItem(*item, &among);
    }
    InferResult result;
    Status s = client.Infer("img", {ItemsView(alone, 1)}, &result);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("inputs[0] item 0: " + bad.says));
    s = client.Infer("img", {ItemsView(among, 3)}, &result);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("inputs[0] item 1: " + bad.says));
    // Pipelined: the bad request third, batched with good ones (maybe the prefetched batch); then
    // 200 good requests, every pool thread decoding some.
    std::vector<const std::string*> items;
    for (size_t k = 0; k < 203; ++k) {
      items.push_back(k == 2 ? &alone : &good_frames[k % goods.size()]);
    }
    std::vector<Status> statuses;
    std::vector<InferResult> results;
    SendAll(client, items, &statuses, &results);
    EXPECT_EQ(statuses[2].code(), StatusCode::kInvalidArgument) << statuses[2].ToString();
    EXPECT_THAT(statuses[2].message(), HasSubstr("inputs[0] item 0: " + bad.says));
    int failed = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k == 2) continue;
      if (!statuses[k].ok()) {
        if (++failed <= 3) ADD_FAILURE() << "good request " << k << ": " << statuses[k].ToString();
        continue;
      }
      ExpectSameAnswer(results[k], want[k % goods.size()], "good request " + std::to_string(k));
    }
    EXPECT_EQ(failed, 0) << "good requests failed after a " << bad.name << " item";
  }
  EXPECT_EQ(farm.WorkerPids(), workers) << "the worker was restarted";
  const json stats = farm.Admin("stats");
  ASSERT_FALSE(stats.is_null());
  EXPECT_EQ(stats["workers"][0]["restarts"], 0);
}

INSTANTIATE_TEST_SUITE_P(Overlap, PipelineRecoveryTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OverlapOn" : "OverlapOff";
                         });

}  // namespace
}  // namespace torchfarm::testing
