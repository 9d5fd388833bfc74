// Fair shares with deadlines in view (issue 32), on the fake clock with the fake worker: with a
// latency_slo_ms, a light client's request is placed by its fair tag, so a heavy client's backlog
// neither refuses it at once nor gets it shed; under a 10:1 rate skew at 2.75x capacity the light
// client's requests are all answered within the SLO and the refusals are the heavy client's, and
// with fair_queueing off (one FIFO) the light client loses its requests as the heavy one does.
// Refusals stay for requests the estimate says cannot make it: a heavy client's next request.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/supervisor/dispatch/dispatcher_fixture.h"

namespace torchfarm {
namespace {

using dispatch_testing::DispatcherTest;
using dispatch_testing::Reply;

class SloFairnessTest : public DispatcherTest {
 protected:
  // latency_slo_ms 100, batches of up to 4 rows, nothing else set.
  static ModelConfig SloModel(bool fair = true) {
    ModelConfig m = dispatch_testing::BatchingModel();
    m.max_queue_delay_us = 0;
    m.latency_slo_ms = 100;
    m.fair_queueing = fair;
    return m;
  }

  struct Tally {
    int sent = 0, refused = 0, ok = 0, within_slo = 0, shed = 0, other = 0;
  };

  // Plays one worker that takes `fixed_ms + per_row_ms * rows` per batch, on 1 ms ticks, while
  // "heavy" sends a one-row request every `heavy_every` ms and "light" every `light_every` ms,
  // for `ms` milliseconds; then serves what is left. Counts each client's answers.
  std::map<std::string, Tally> Run(int ms, int heavy_every, int light_every, int64_t fixed_ms,
                                   int64_t per_row_ms) {
    std::map<std::string, Tally> tally;
    std::map<std::string, TimePoint> sent_at;
    TimePoint busy_until = clock_.Now();
    bool running = false;
    int64_t next = 0;
    auto offer = [&](const std::string& client) {
      const std::string id = client + "-" + std::to_string(next++);
      ++tally[client].sent;
      const Status s = Offer(client, id, {1, 2});
      if (s.ok()) {
        sent_at[id] = clock_.Now();
      } else {
        EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
        ++tally[client].refused;
      }
    };
    for (int t = 0; t < ms || running || !models_[0].queue.empty(); ++t) {
      if (t < ms && t % heavy_every == 0) offer("heavy");
      if (t < ms && t % light_every == 0) offer("light");
      if (::testing::Test::HasFatalFailure()) return tally;
      dispatcher_.ExpireDeadlines();
      dispatcher_.DispatchAll();
      // The worker: the batch it runs ends at busy_until; then it starts the next one held.
      for (;;) {
        if (running && clock_.Now() >= busy_until) {
          EXPECT_TRUE(worker(0).ServeOne());
          responses_.Collect(slot(0));
          running = false;
          dispatcher_.DispatchAll();
        }
        if (running || worker(0).pending() == 0) break;
        const int64_t rows = worker(0).Hold().at(0).rows;
        worker(0).compute_us = static_cast<uint64_t>((fixed_ms + per_row_ms * rows) * 1000);
        busy_until = std::max(busy_until, clock_.Now()) + Millis(fixed_ms + per_row_ms * rows);
        running = true;
      }
      Reply reply;
      while (Receive(&reply, std::chrono::milliseconds(0))) {
        const std::string id = reply.id();
        const std::string client = id.substr(0, id.find('-'));
        Tally& c = tally[client];
        if (reply.header.status.ok()) {
          ++c.ok;
          c.within_slo += clock_.Now() - sent_at[id] <= Millis(100);
        } else if (reply.header.status.code() == StatusCode::kDeadlineExceeded) {
          ++c.shed;
        } else {
          ++c.other;
        }
      }
      clock_.Advance(Millis(1));
      EXPECT_LT(t, ms + 10'000) << "the queue never drained";
      if (t >= ms + 10'000) break;
    }
    return tally;
  }
};

TEST_F(SloFairnessTest, ALightClientsRequestIsNotRefusedForAHeavyClientsBacklog) {
  Serve(SloModel(), 1);
  TeachCost(10, 10);
  MakeReady(slot(0), clock_.Now());
  // 20 rows of "heavy" queued (the worker not taking them yet): 5 batches, 250 ms, so its next
  // request cannot make the 100 ms SLO.
  for (int i = 0; i < 20; ++i) {
    PendingRequest r;
    r.client = "heavy";
    r.received = clock_.Now();
    r.inputs = {TensorSpec{DType::kFloat32, {1, 2}}};
    ASSERT_TRUE(models_[0].queue.Push(r));
  }
  const Status heavy = Offer("heavy", "h-next", {1, 2});
  EXPECT_EQ(heavy.code(), StatusCode::kDeadlineExceeded) << heavy.ToString();
  EXPECT_NE(heavy.message().find("20 rows queued ahead"), std::string::npos) << heavy.message();
  // "light" is next in fair order: its estimate counts the head's round only.
  const Status light = Offer("light", "l0", {1, 2});
  EXPECT_TRUE(light.ok()) << light.ToString();
}

TEST_F(SloFairnessTest, UnderA10To1SkewAtOverloadTheLightClientIsServedWithinTheSlo) {
  Serve(SloModel(), 1);
  TeachCost(2, 2);  // a batch of 4 rows: 10 ms; capacity 400 rows/s
  MakeReady(slot(0), clock_.Now());
  // heavy 1,000/s, light 100/s: 2.75x capacity; light's fair share (200/s) covers its rate.
  const auto tally = Run(2'000, 1, 10, 2, 2);
  const Tally& light = tally.at("light");
  const Tally& heavy = tally.at("heavy");
  SCOPED_TRACE("light: sent " + std::to_string(light.sent) + " refused " +
               std::to_string(light.refused) + " shed " + std::to_string(light.shed) + " ok " +
               std::to_string(light.ok) + " within " + std::to_string(light.within_slo) +
               "; heavy: sent " + std::to_string(heavy.sent) + " refused " +
               std::to_string(heavy.refused) + " shed " + std::to_string(heavy.shed) + " ok " +
               std::to_string(heavy.ok));
  EXPECT_EQ(light.sent, 200);
  EXPECT_EQ(light.refused + light.shed, 0) << "the light client's requests were refused or shed";
  EXPECT_EQ(light.ok, light.sent);
  EXPECT_EQ(light.within_slo, light.ok);
  EXPECT_GT(heavy.refused + heavy.shed, heavy.sent / 2) << "the load was no overload";
  EXPECT_EQ(heavy.other + light.other, 0);
  EXPECT_EQ(heavy.ok + heavy.refused + heavy.shed, heavy.sent) << "every request answered once";
}

TEST_F(SloFairnessTest, WithOneFifoTheLightClientLosesRequestsAsTheHeavyOneDoes) {
  Serve(SloModel(/*fair=*/false), 1);
  TeachCost(2, 2);
  MakeReady(slot(0), clock_.Now());
  const auto tally = Run(2'000, 1, 10, 2, 2);
  const Tally& light = tally.at("light");
  EXPECT_GT(light.refused + light.shed, light.sent / 4)
      << "without fair queueing the heavy client's backlog is ahead of the light one's requests";
}

}  // namespace
}  // namespace torchfarm
