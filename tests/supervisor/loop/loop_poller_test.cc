// LoopPoller (supervisor/loop/loop_poller.h) with real ZeroMQ sockets and descriptors: it must
// see every message zmq::poll would, without a wait, including the ones whose descriptor signal
// was consumed by a send or receive in between (the classic ZMQ_FD mistake).
#include "supervisor/loop/loop_poller.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

namespace torchfarm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long ElapsedMs(Clock::time_point since) {
  return static_cast<long>(std::chrono::duration_cast<milliseconds>(Clock::now() - since).count());
}

class LoopPollerTest : public ::testing::Test {
 protected:
  LoopPollerTest()
      : router_(context_, zmq::socket_type::router), dealer_(context_, zmq::socket_type::dealer) {
    router_.bind("inproc://loop-poller");
    dealer_.connect("inproc://loop-poller");
  }
  // The router's view: [identity, payload].
  std::string ReceiveAtRouter() {
    zmq::message_t identity, payload;
    EXPECT_TRUE(router_.recv(identity, zmq::recv_flags::dontwait));
    EXPECT_TRUE(router_.recv(payload, zmq::recv_flags::dontwait));
    identity_ = identity.to_string();
    return payload.to_string();
  }
  // The dealer sends "late" 100 ms from now, while `turn` waits (it returns whether the router
  // read as readable; the descriptor may fire for commands that carry no message yet, so it is
  // called again, as the loop does). Expects the message seen within 2 s, and received.
  void ExpectLateMessageWakes(const std::function<bool()>& turn) {
    std::thread sender([&] {
      std::this_thread::sleep_for(milliseconds(100));
      dealer_.send(zmq::buffer(std::string("late")));
    });
    const auto start = Clock::now();
    bool readable = false;
    while (!readable && ElapsedMs(start) < 5'000) readable = turn();
    sender.join();
    ASSERT_TRUE(readable);
    EXPECT_LT(ElapsedMs(start), 2'000);
    EXPECT_EQ(ReceiveAtRouter(), "late");
  }
  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t dealer_;
  std::string identity_;
};

TEST_F(LoopPollerTest, NothingPendingIsNotReadyAndATimeoutReturns) {
  LoopPoller poller;
  const size_t socket = poller.AddSocket(static_cast<void*>(router_));
  const auto start = Clock::now();
  ASSERT_TRUE(poller.Wait(milliseconds(50)));
  EXPECT_FALSE(poller.Readable(socket));
  EXPECT_GE(ElapsedMs(start), 40);
}

TEST_F(LoopPollerTest, AMessageQueuedBeforeTheWaitIsSeenWithoutWaiting) {
  dealer_.send(zmq::buffer(std::string("one")));
  LoopPoller poller;
  // Let it arrive, then look: a message already in the socket does not wake its descriptor again.
  std::this_thread::sleep_for(milliseconds(20));
  const size_t socket = poller.AddSocket(static_cast<void*>(router_));
  const auto start = Clock::now();
  ASSERT_TRUE(poller.Wait(milliseconds(5'000)));
  EXPECT_TRUE(poller.Readable(socket));
  EXPECT_LT(ElapsedMs(start), 1'000);
  EXPECT_EQ(ReceiveAtRouter(), "one");
}

TEST_F(LoopPollerTest, AMessageArrivingDuringTheWaitWakesIt) {
  LoopPoller poller;
  const size_t socket = poller.AddSocket(static_cast<void*>(router_));
  ExpectLateMessageWakes([&] {
    EXPECT_TRUE(poller.Wait(milliseconds(5'000)));
    return poller.Readable(socket);
  });
}

// Two messages arrive; the loop takes one and replies on the same socket, which processes the
// socket's commands and consumes its descriptor's signal. The second must still be seen at once.
TEST_F(LoopPollerTest, AMessageLeftAfterAReceiveAndASendIsStillSeen) {
  dealer_.send(zmq::buffer(std::string("first")));
  dealer_.send(zmq::buffer(std::string("second")));
  LoopPoller poller;
  for (const char* expected : {"first", "second"}) {
    poller.Reset();
    const size_t socket = poller.AddSocket(static_cast<void*>(router_));
    bool readable = false;
    const auto start = Clock::now();
    while (!readable && ElapsedMs(start) < 3'000) {
      ASSERT_TRUE(poller.Wait(milliseconds(3'000)));
      readable = poller.Readable(socket);
    }
    ASSERT_TRUE(readable) << expected;
    EXPECT_LT(ElapsedMs(start), 1'000) << expected;
    EXPECT_EQ(ReceiveAtRouter(), expected);
    router_.send(zmq::buffer(identity_), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(std::string("reply")));
  }
  zmq::message_t reply;
  ASSERT_TRUE(dealer_.recv(reply));
  EXPECT_EQ(reply.to_string(), "reply");
}

// A watched socket (the supervisor's four), its sends and receives counted: across turns with
// receives and sends in between, a queued message is seen without a wait and a late one wakes
// the wait, as with AddSocket(socket).
TEST_F(LoopPollerTest, AWatchedSocketWhoseUsesAreCountedIsSeenAlike) {
  dealer_.send(zmq::buffer(std::string("first")));
  dealer_.send(zmq::buffer(std::string("second")));
  LoopPoller poller;
  LoopPoller::SocketWatch watch;
  uint64_t uses = 0;
  auto wait_readable = [&](long limit_ms) {
    poller.Reset();
    const size_t socket = poller.AddSocket(static_cast<void*>(router_), &watch, uses);
    const auto start = Clock::now();
    while (ElapsedMs(start) < limit_ms) {
      if (!poller.Wait(milliseconds(limit_ms))) return false;
      if (poller.Readable(socket)) return true;
      poller.Reset();
      poller.AddSocket(static_cast<void*>(router_), &watch, uses);
    }
    return false;
  };
  for (const char* expected : {"first", "second"}) {
    const auto start = Clock::now();
    ASSERT_TRUE(wait_readable(3'000)) << expected;
    EXPECT_LT(ElapsedMs(start), 1'000) << expected;
    EXPECT_EQ(ReceiveAtRouter(), expected);
    router_.send(zmq::buffer(identity_), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(std::string("reply")));
    ++uses;  // one count for the receive and the send: only a change matters
  }
  EXPECT_EQ(watch.fd, LoopPoller::SocketDescriptor(static_cast<void*>(router_)));
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(100));
    dealer_.send(zmq::buffer(std::string("late")));
  });
  const auto start = Clock::now();
  const bool late = wait_readable(5'000);
  sender.join();
  ASSERT_TRUE(late);
  EXPECT_LT(ElapsedMs(start), 2'000);
  EXPECT_EQ(ReceiveAtRouter(), "late");
}

// The saving: a watched socket that said "no input" and was not used since is asked nothing
// before the wait (its descriptor alone wakes it); a counted use makes it asked again.
TEST_F(LoopPollerTest, AnUntouchedWatchedSocketWithoutInputIsNotAskedBeforeTheWait) {
  LoopPoller poller;
  LoopPoller::SocketWatch watch;
  auto turn = [&](uint64_t uses) {
    poller.Reset();
    const size_t socket = poller.AddSocket(static_cast<void*>(router_), &watch, uses);
    const uint64_t before = poller.questions();
    EXPECT_TRUE(poller.Wait(milliseconds(0)));
    EXPECT_FALSE(poller.Readable(socket));
    return poller.questions() - before;
  };
  EXPECT_GE(turn(0), 1u) << "first turn: asked";
  EXPECT_FALSE(watch.input);
  EXPECT_EQ(turn(0), 0u) << "untouched since it said no input";
  EXPECT_EQ(turn(0), 0u);
  EXPECT_GE(turn(1), 1u) << "used since: asked again";
  EXPECT_EQ(turn(1), 0u);

  // Still woken by its descriptor, and then asked.
  ExpectLateMessageWakes([&] {
    poller.Reset();
    const size_t socket = poller.AddSocket(static_cast<void*>(router_), &watch, 1);
    EXPECT_TRUE(poller.Wait(milliseconds(5'000)));
    return poller.Readable(socket);
  });
}

// The supervisor keeps its list from turn to turn while its descriptors stay the same (Poll),
// bringing only the watched sockets' counts up to date with SetUses: the kept list must answer
// as a rebuilt one would. A message queued meanwhile, a count that moved, a message that arrives
// during the wait and a descriptor that fires are all seen; an untouched socket is not asked.
TEST_F(LoopPollerTest, AKeptListWithItsCountsUpdatedSeesWhatARebuiltOneWould) {
  LoopPoller poller;
  LoopPoller::SocketWatch watch;
  const int bell = ::eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(bell, 0);
  const size_t socket = poller.AddSocket(static_cast<void*>(router_), &watch, 0);
  const size_t descriptor = poller.AddDescriptor(bell);
  auto turn = [&](uint64_t uses, int wait_ms) {
    poller.SetUses(socket, uses);  // no Reset: the same two items as the last turn
    EXPECT_TRUE(poller.Wait(milliseconds(wait_ms)));
  };
  turn(0, 0);
  EXPECT_FALSE(poller.Readable(socket));
  EXPECT_FALSE(poller.Readable(descriptor));
  const uint64_t asked = poller.questions();
  turn(0, 0);
  EXPECT_EQ(poller.questions(), asked) << "untouched since it said no input: not asked";
  EXPECT_EQ(poller.size(), 2u);

  dealer_.send(zmq::buffer(std::string("queued")));
  turn(0, 1'000);
  ASSERT_TRUE(poller.Readable(socket)) << "its descriptor fired: asked, and it has input";
  EXPECT_EQ(ReceiveAtRouter(), "queued");
  turn(2, 0);  // two receives since: asked before the wait, and nothing is left
  EXPECT_FALSE(poller.Readable(socket));

  const uint64_t one = 1;
  ASSERT_EQ(::write(bell, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  turn(2, 1'000);
  EXPECT_TRUE(poller.Readable(descriptor)) << "a kept descriptor still reports";
  EXPECT_FALSE(poller.Readable(socket));
  uint64_t drained = 0;
  ASSERT_EQ(::read(bell, &drained, sizeof(drained)), static_cast<ssize_t>(sizeof(drained)));
  turn(2, 0);
  EXPECT_FALSE(poller.Readable(descriptor)) << "results start afresh every wait";

  ExpectLateMessageWakes([&] {
    turn(2, 5'000);
    return poller.Readable(socket);
  });

  // The count is what keeps a kept list honest: the socket said "no input", then a message came
  // and a send processed its signal before the wait. Only the moved count (SetUses) makes the
  // wait ask; without it the wait would sleep on a descriptor that no longer fires.
  turn(4, 0);
  EXPECT_FALSE(poller.Readable(socket));
  dealer_.send(zmq::buffer(std::string("hidden")));
  std::this_thread::sleep_for(milliseconds(50));  // inproc: its signal is in the mailbox now
  router_.send(zmq::buffer(identity_), zmq::send_flags::sndmore);
  router_.send(zmq::buffer(std::string("reply")));  // processes the mailbox: the signal is gone
  const auto hidden = Clock::now();
  turn(6, 1'000);
  EXPECT_TRUE(poller.Readable(socket));
  EXPECT_LT(ElapsedMs(hidden), 500) << "seen before the wait, not after a timeout";
  EXPECT_EQ(ReceiveAtRouter(), "hidden");
  ::close(bell);
}

// The job socket's way (supervisor.cc): its reader drains it with non-blocking receives, and an
// EAGAIN stands for the ZMQ_EVENTS answer (DrainedWithoutInput); a fired descriptor makes it
// readable without a question (probe_by_reading), and the read finds out. No message may be missed:
// not one sent between the drain and the next wait, not one sent during the wait, not one that
// arrived with a descriptor wake-up that carried nothing.
TEST_F(LoopPollerTest, ASocketProbedByReadingMissesNoMessageAndAsksNothing) {
  LoopPoller poller;
  LoopPoller::SocketWatch watch;
  watch.probe_by_reading = true;
  uint64_t uses = 0;
  // One turn: the wait, then the reader's drain as JobAcceptor::ReadJobs does it.
  auto turn = [&](milliseconds timeout, uint64_t* questions) {
    poller.Reset();
    const size_t socket = poller.AddSocket(static_cast<void*>(router_), &watch, uses);
    const uint64_t before = poller.questions();
    EXPECT_TRUE(poller.Wait(timeout));
    *questions = poller.questions() - before;
    std::vector<std::string> got;
    if (!poller.Readable(socket)) return got;
    ++uses;
    zmq::message_t identity, payload;
    while (router_.recv(identity, zmq::recv_flags::dontwait)) {
      EXPECT_TRUE(router_.recv(payload, zmq::recv_flags::dontwait));
      got.push_back(payload.to_string());
    }
    LoopPoller::DrainedWithoutInput(&watch, uses);
    return got;
  };
  uint64_t questions = 0;
  dealer_.send(zmq::buffer(std::string("first")));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(turn(milliseconds(1'000), &questions), std::vector<std::string>{"first"});
  EXPECT_FALSE(watch.input);
  EXPECT_EQ(watch.uses, uses);

  // Sent after the drain, before the next wait: the descriptor was armed by the drain.
  dealer_.send(zmq::buffer(std::string("between")));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(turn(milliseconds(2'000), &questions), std::vector<std::string>{"between"});
  EXPECT_EQ(questions, 0u) << "neither before the wait (drained, untouched) nor after it (probed)";

  // Sent during the wait.
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(100));
    dealer_.send(zmq::buffer(std::string("during")));
  });
  const auto start = Clock::now();
  std::vector<std::string> got;
  while (got.empty() && ElapsedMs(start) < 5'000) got = turn(milliseconds(5'000), &questions);
  sender.join();
  EXPECT_EQ(got, std::vector<std::string>{"during"});
  EXPECT_LT(ElapsedMs(start), 2'000);

  // Nothing pending: the wait times out, not readable, nothing asked.
  EXPECT_TRUE(turn(milliseconds(20), &questions).empty());
  EXPECT_EQ(questions, 0u);
}

TEST_F(LoopPollerTest, DescriptorsKeepTheirIndicesAndReportReadinessAndHangUp) {
  const int doorbell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(doorbell, 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  LoopPoller poller;
  for (int turn = 0; turn < 2; ++turn) {  // Reset starts the indices again at 0
    poller.Reset();
    EXPECT_EQ(poller.AddSocket(nullptr), 0u);
    EXPECT_EQ(poller.AddDescriptor(-1), 1u);
    EXPECT_EQ(poller.AddDescriptor(doorbell), 2u);
    EXPECT_EQ(poller.AddDescriptor(pipe_fds[0]), 3u);
    EXPECT_EQ(poller.size(), 4u);
  }
  ASSERT_TRUE(poller.Wait(milliseconds(0)));
  for (size_t i = 0; i < 4; ++i) EXPECT_FALSE(poller.Readable(i)) << i;
  const uint64_t one = 1;
  ASSERT_EQ(::write(doorbell, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  ::close(pipe_fds[1]);  // a worker's output pipe whose writer died: POLLHUP, no POLLIN
  ASSERT_TRUE(poller.Wait(milliseconds(2'000)));
  EXPECT_FALSE(poller.Readable(0));
  EXPECT_FALSE(poller.Readable(1));
  EXPECT_TRUE(poller.Readable(2));
  EXPECT_NE(poller.DescriptorEvents(3) & POLLHUP, 0);
  EXPECT_FALSE(poller.Readable(99)) << "an index past the list is never ready";
  ::close(pipe_fds[0]);
  ::close(doorbell);
}

}  // namespace
}  // namespace torchfarm
