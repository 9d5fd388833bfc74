// The worker's image pipeline (worker/pipeline_stages.h) under worker deaths: the decode pool and
// the stages hold requests the supervisor must re-run when the worker is SIGKILLed mid-decode.
// A crash fault on the 3rd batch (while the pool decodes the next one) plus a kill storm under
// 8 clients: every request answered exactly once and correctly, none lost.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "jpeg_writer.h"
#include "common/bytes_items.h"
#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Ms = std::chrono::milliseconds;

json ImageModel() {
  json model = ModelEntry("img", "convnet.pt", {-1}, 2,
                          {{"max_batch_size", 8}, {"max_queue_delay_us", 2'000}});
  model["inputs"] = json::array({{{"dtype", "bytes"}, {"shape", {-1}}}});
  model["pipeline"] = {{"decode", {{"format", "jpeg"}}},
                       {"preprocess", ModelDir() + "/jpeg_pre.pt"},
                       {"postprocess", ModelDir() + "/topk_post.pt"}};
  return model;
}

struct Outcome {
  std::atomic<int> sent{0}, ok{0}, wrong{0}, errors{0}, lost{0};
  std::mutex mutex;
  std::string first_error;
};

TEST(PipelineChaos, WorkerKilledMidDecodeLosesNoRequest) {
  json extra = {{"heartbeat_ms", nullptr}};  // the documented default
  Farm farm(json::array({ImageModel()}), extra);
  // Worker 0's first process crashes inside its 3rd batch, while the pool decodes the 4th.
  ASSERT_TRUE(farm.Start({}, {"TORCHFARM_FAULT=crash@3/w0"}));
  ASSERT_TRUE(farm.WaitReady()) << farm.error();

  // Requests of 1..3 images, and their answers from a calm farm: the reference.
  std::vector<std::string> images;
  for (unsigned k = 0; k < 6; ++k) images.push_back(NoiseJpeg(320 + 16 * k, 240, k));
  std::vector<std::string> requests;
  for (size_t r = 0; r < 6; ++r) {
    std::string items;
    for (size_t k = 0; k <= r % 3; ++k) AppendBytesItem(images[(r + k) % images.size()], &items);
    requests.push_back(items);
  }
  auto view = [&](size_t r) {
    return TensorView(TensorSpec{DType::kBytes, {static_cast<int64_t>(r % 3 + 1)}},
                      requests[r].data(), requests[r].size());
  };
  std::vector<InferResult> reference(requests.size());
  {
    Client client(farm.endpoint(), 30'000);
    for (size_t r = 0; r < requests.size(); ++r) {
      // The crash fault may take one of these; max_retries re-runs it on the restarted worker.
      Status s = client.Infer("img", {view(r)}, &reference[r]);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  Outcome outcome;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      Client client(farm.endpoint(), 60'000);
      for (size_t n = static_cast<size_t>(c); !stop; ++n) {
        const size_t r = n % requests.size();
        InferResult result;
        ++outcome.sent;
        Status s = client.Infer("img", {view(r)}, &result);
        if (s.code() == StatusCode::kDeadlineExceeded && result.header.raw.is_null()) {
          ++outcome.lost;
          break;
        }
        bool right = s.ok() && result.outputs.size() == 2 &&
                     result.outputs[1].data == reference[r].outputs[1].data;
        if (!s.ok()) {
          ++outcome.errors;
          std::lock_guard<std::mutex> lock(outcome.mutex);
          if (outcome.first_error.empty()) outcome.first_error = s.ToString();
        } else if (!right) {
          ++outcome.wrong;
        } else {
          ++outcome.ok;
        }
      }
    });
  }
  std::mt19937 rng(11);
  int kills = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < Ms(5'000)) {
    std::this_thread::sleep_for(Ms(400));
    std::vector<pid_t> alive;
    for (pid_t p : farm.WorkerPids()) {
      if (p > 0) alive.push_back(p);
    }
    if (!alive.empty() && ::kill(alive[rng() % alive.size()], SIGKILL) == 0) ++kills;
  }
  const bool back = farm.WaitReady(-1, 15'000);
  stop = true;
  for (auto& t : clients) t.join();

  EXPECT_GE(kills, 5);
  EXPECT_EQ(outcome.lost.load(), 0);
  EXPECT_EQ(outcome.wrong.load(), 0);
  EXPECT_EQ(outcome.ok.load() + outcome.errors.load(), outcome.sent.load());
  // Retries exhausted (a request on killed workers more than max_retries times) is rare.
  EXPECT_LE(outcome.errors.load(), outcome.sent.load() / 50 + 1) << outcome.first_error;
  EXPECT_TRUE(back) << farm.Admin("stats").dump();
  std::printf("[ measure ] pipeline kill storm: %d kills, %d requests ok, %d errors of %d\n", kills,
              outcome.ok.load(), outcome.errors.load(), outcome.sent.load());
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
