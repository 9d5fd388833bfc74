// ReplyBacklog (supervisor/dispatch/reply_backlog.h): a reply's header frame counts against its
// client, its own bytes and its data frames', until libzmq lets go of it; the header's text is
// written in place into the block the frame owns, or copied from a string. Checked on the frames
// themselves, and through a real socket pair, where the count drops only once the receiver has
// taken the frame.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "supervisor/dispatch/reply_backlog.h"

namespace torchfarm {
namespace {

std::string_view Text(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

TEST(ReplyBacklog, AHeaderWrittenInPlaceCountsItsBytesAndTheFramesUntilReleased) {
  ReplyBacklog backlog;
  const std::string_view text = R"({"v":1,"id":7,"status":"ok"})";
  {
    // The writer may use less than the bound: the frame is what it wrote.
    zmq::message_t header =
        backlog.TrackedHeader("client-a", text.size() + 100, 1024, [&](char* out) {
          std::memcpy(out, text.data(), text.size());
          return out + text.size();
        });
    EXPECT_EQ(Text(header), text);
    EXPECT_EQ(backlog.Of("client-a").replies, 1);
    EXPECT_EQ(backlog.Of("client-a").bytes, static_cast<int64_t>(text.size() + 1024));
    EXPECT_EQ(backlog.Of("client-b").replies, 0);
    zmq::message_t copied = backlog.TrackedHeader("client-b", std::string_view("{}"), 0);
    EXPECT_EQ(Text(copied), "{}");
    EXPECT_EQ(backlog.Total().replies, 2);
    EXPECT_EQ(backlog.Total().bytes, static_cast<int64_t>(text.size() + 1024 + 2));
  }
  // Both frames destroyed unsent: nothing outstanding, and the sweep forgets both clients.
  EXPECT_EQ(backlog.Total().replies, 0);
  EXPECT_EQ(backlog.Total().bytes, 0);
  EXPECT_EQ(backlog.Sweep(), 0u);
}

TEST(ReplyBacklog, AnEmptyHeaderAndAnEmptyWriteMakeEmptyFrames) {
  ReplyBacklog backlog;
  zmq::message_t empty = backlog.TrackedHeader("c", std::string_view(), 5);
  EXPECT_EQ(empty.size(), 0u);
  zmq::message_t nothing = backlog.TrackedHeader("c", 0, 0, [](char* out) { return out; });
  EXPECT_EQ(nothing.size(), 0u);
  EXPECT_EQ(backlog.Of("c").replies, 2);
  EXPECT_EQ(backlog.Of("c").bytes, 5);
}

TEST(ReplyBacklog, AFrameSentCountsUntilTheReceiverLetsGoOfIt) {
  zmq::context_t context;
  zmq::socket_t sender(context, zmq::socket_type::pair);
  zmq::socket_t receiver(context, zmq::socket_type::pair);
  receiver.bind("inproc://reply-backlog-test");
  sender.connect("inproc://reply-backlog-test");
  ReplyBacklog backlog;
  for (int i = 0; i < 3; ++i) {
    const std::string text = "header " + std::to_string(i);
    zmq::message_t header = backlog.TrackedHeader("reader", text.size(), 10, [&](char* out) {
      std::memcpy(out, text.data(), text.size());
      return out + text.size();
    });
    ASSERT_TRUE(sender.send(header, zmq::send_flags::none));
  }
  EXPECT_EQ(backlog.Of("reader").replies, 3) << "queued, not yet taken";
  for (int i = 0; i < 3; ++i) {
    zmq::message_t got;
    ASSERT_TRUE(receiver.recv(got, zmq::recv_flags::none));
    EXPECT_EQ(Text(got), "header " + std::to_string(i));
  }
  // Each received frame was destroyed at the end of its iteration: libzmq freed every block.
  EXPECT_EQ(backlog.Of("reader").replies, 0);
  EXPECT_EQ(backlog.Of("reader").bytes, 0);
}

}  // namespace
}  // namespace torchfarm
