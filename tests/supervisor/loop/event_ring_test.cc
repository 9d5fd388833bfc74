// EventRing (supervisor/loop/event_ring.h): bounded, newest first, sequence numbers that a reader
// resumes from, cut texts.
#include "supervisor/loop/event_ring.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace torchfarm {
namespace {

using nlohmann::json;

TEST(EventRingTest, KeepsTheLastCapacityEventsNewestFirst) {
  EventRing ring(3);
  int64_t now = 1000;
  ring.set_wall_clock([&] { return now++; });
  for (int i = 1; i <= 5; ++i) ring.Add("exit", "event " + std::to_string(i), "mlp", i);
  EXPECT_EQ(ring.size(), 3u) << "bounded: the two oldest were dropped";
  EXPECT_EQ(ring.last_seq(), 5u);
  const json events = ring.ToJson();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["seq"], 5) << "newest first";
  EXPECT_EQ(events[0]["text"], "event 5");
  EXPECT_EQ(events[0]["kind"], "exit");
  EXPECT_EQ(events[0]["model"], "mlp");
  EXPECT_EQ(events[0]["worker"], 5);
  EXPECT_EQ(events[0]["time_ms"], 1004);
  EXPECT_EQ(events[2]["seq"], 3);
  EXPECT_EQ(events[2]["text"], "event 3");
}

TEST(EventRingTest, AReaderGetsOnlyWhatCameAfterTheLastItSawAndAtMostItsLimit) {
  EventRing ring;
  for (int i = 1; i <= 10; ++i) ring.Add("restart", std::to_string(i));
  const json after7 = ring.ToJson(EventRing::kDefaultCapacity, 7);
  ASSERT_EQ(after7.size(), 3u);
  EXPECT_EQ(after7[0]["seq"], 10);
  EXPECT_EQ(after7[2]["seq"], 8);
  EXPECT_TRUE(ring.ToJson(EventRing::kDefaultCapacity, 10).empty()) << "nothing new";
  const json two = ring.ToJson(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]["seq"], 10);
  EXPECT_EQ(two[1]["seq"], 9);
}

TEST(EventRingTest, ModelAndWorkerAreLeftOutWhenTheEventHasNone) {
  EventRing ring;
  ring.Add("reload", "reloaded: no changes");
  const json e = ring.ToJson()[0];
  EXPECT_FALSE(e.contains("model"));
  EXPECT_FALSE(e.contains("worker"));
  EXPECT_EQ(e["text"], "reloaded: no changes");
  EXPECT_GT(e["time_ms"].get<int64_t>(), 1'600'000'000'000) << "the wall clock by default";
}

TEST(EventRingTest, ALongTextIsCutWithoutSplittingACharacter) {
  EventRing ring;
  std::string text(EventRing::kMaxTextBytes - 1, 'x');
  text += "\xc3\xa9\xc3\xa9 and more";  // a two-byte character across the limit
  ring.Add("exit", text);
  const std::string cut = ring.events().back().text;
  EXPECT_LE(cut.size(), EventRing::kMaxTextBytes + 3);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  EXPECT_EQ(cut.substr(0, cut.size() - 3), std::string(EventRing::kMaxTextBytes - 1, 'x'))
      << "the character that did not fit is dropped whole";
  EXPECT_NO_THROW(ring.ToJson().dump());
}

TEST(EventRingTest, ACapacityOfZeroStillKeepsTheNewest) {
  EventRing ring(0);
  ring.Add("exit", "a");
  ring.Add("exit", "b");
  ASSERT_EQ(ring.size(), 1u);
  EXPECT_EQ(ring.ToJson()[0]["text"], "b");
}

}  // namespace
}  // namespace torchfarm
