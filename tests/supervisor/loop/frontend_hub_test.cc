// FrontendHub and its Mailbox (supervisor/loop/frontend_hub.h): the eventfd is readable exactly
// while a mailbox holds something, so a level-triggered wait never sleeps over a message and never
// spins on an empty mailbox; many channels pushing at once lose nothing; a reply for a channel that
// detached is refused, never delivered into a mailbox that is going away.
#include "supervisor/loop/frontend_hub.h"

#include <poll.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

bool FdReadable(int fd, int timeout_ms = 0) {
  pollfd item{fd, POLLIN, 0};
  return ::poll(&item, 1, timeout_ms) == 1 && (item.revents & POLLIN);
}

FrontendMessage HubMessage(const std::string& text) {
  FrontendMessage message;
  message.emplace_back(text.data(), text.size());
  return message;
}

TEST(FrontendMailbox, ItsDescriptorIsReadableExactlyWhileItHoldsSomething) {
  FrontendMailbox mailbox;
  EXPECT_FALSE(FdReadable(mailbox.fd()));
  FrontendMessage out;
  EXPECT_FALSE(mailbox.Pop(&out));
  mailbox.Push(HubMessage("a"));
  mailbox.Push(HubMessage("b"));
  EXPECT_TRUE(FdReadable(mailbox.fd()));
  EXPECT_EQ(mailbox.size(), 2u);
  ASSERT_TRUE(mailbox.Pop(&out));
  EXPECT_EQ(out[0].to_string(), "a") << "oldest first";
  EXPECT_TRUE(FdReadable(mailbox.fd())) << "one left: still readable";
  ASSERT_TRUE(mailbox.Pop(&out));
  EXPECT_EQ(out[0].to_string(), "b");
  EXPECT_FALSE(FdReadable(mailbox.fd())) << "empty: a level-triggered wait must sleep";
  mailbox.Push(HubMessage("c"));
  EXPECT_TRUE(FdReadable(mailbox.fd())) << "a push into the empty mailbox wakes the reader";
}

// Four channels push as fast as they can while one reader waits on the descriptor and takes what
// it finds (the loop's way): every request arrives once, each channel's in order, and the reader
// never waits on a descriptor that says nothing is there while something is.
TEST(FrontendMailbox, ManyProducersOneLevelTriggeredReaderLoseNothing) {
  Mailbox<FrontendRequest> mailbox;
  constexpr int kProducers = 4;
  constexpr int kEach = 20'000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&mailbox, p] {
      for (int i = 0; i < kEach; ++i) {
        FrontendRequest request;
        request.call_id = static_cast<uint64_t>(p) * kEach + i;
        mailbox.Push(std::move(request));
      }
    });
  }
  std::vector<uint64_t> next(kProducers, 0);
  int received = 0;
  int stalls = 0;
  FrontendRequest request;
  while (received < kProducers * kEach) {
    // A wait of 2 s that times out with messages left would be a lost wake-up.
    if (!FdReadable(mailbox.fd(), 2'000)) {
      ++stalls;
      if (mailbox.size() > 0 || stalls > 3) break;
      continue;
    }
    for (int n = 0; n < 64 && mailbox.Pop(&request); ++n) {
      const uint64_t producer = request.call_id / kEach;
      EXPECT_EQ(request.call_id % kEach, next[producer]) << "producer " << producer;
      next[producer] = request.call_id % kEach + 1;
      ++received;
    }
  }
  for (auto& thread : producers) thread.join();
  EXPECT_EQ(received, kProducers * kEach);
  EXPECT_EQ(mailbox.size(), 0u);
  EXPECT_FALSE(FdReadable(mailbox.fd()));
}

TEST(FrontendHub, RepliesReachTheChannelTheIdentityNamesAndNoneAfterItDetaches) {
  FrontendHub hub;
  FrontendMailbox first_replies;
  FrontendMailbox second_replies;
  const zmq::message_t first = hub.Attach(&first_replies);
  const zmq::message_t second = hub.Attach(&second_replies);
  ASSERT_NE(first.to_string(), second.to_string()) << "each channel its own identity";
  EXPECT_TRUE(hub.Reply(second, HubMessage("to second")));
  EXPECT_TRUE(hub.Reply(first, HubMessage("to first")));
  FrontendMessage out;
  ASSERT_TRUE(second_replies.Pop(&out));
  EXPECT_EQ(out[0].to_string(), "to second");
  ASSERT_TRUE(first_replies.Pop(&out));
  EXPECT_EQ(out[0].to_string(), "to first");

  hub.Detach(first);
  EXPECT_FALSE(hub.Reply(first, HubMessage("late"))) << "the channel stopped: refused";
  EXPECT_EQ(first_replies.size(), 0u);
  EXPECT_TRUE(hub.Reply(second, HubMessage("still here")));
  // Identities that name no channel: another's size, or never handed out.
  EXPECT_FALSE(hub.Reply(zmq::message_t(std::string("routing-id")), HubMessage("x")));
  const uint32_t unknown = 999'999;
  EXPECT_FALSE(hub.Reply(zmq::message_t(&unknown, sizeof(unknown)), HubMessage("x")));
  hub.Detach(zmq::message_t(std::string("junk")));  // harmless
}

// The loop replies while channels come and go: once Detach returns, nothing more lands in that
// channel's mailbox (a FarmChannel frees its mailbox right after).
TEST(FrontendHub, DetachWaitsOutAReplyInProgress) {
  FrontendHub hub;
  std::atomic<int> detached_and_delivered{0};
  for (int round = 0; round < 200; ++round) {
    FrontendMailbox replies;
    const zmq::message_t identity = hub.Attach(&replies);
    std::atomic<bool> detached{false};
    std::thread loop([&] {
      while (!detached.load()) hub.Reply(identity, HubMessage("r"));
      hub.Reply(identity, HubMessage("after"));
    });
    std::this_thread::yield();
    hub.Detach(identity);
    const size_t at_detach = replies.size();
    detached = true;
    loop.join();
    if (replies.size() != at_detach) ++detached_and_delivered;
  }
  EXPECT_EQ(detached_and_delivered.load(), 0);
}

}  // namespace
}  // namespace torchfarm
