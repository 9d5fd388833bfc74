// The zygote launch channel's codec (ipc/zygote_protocol.h): messages and descriptors over a real
// SOCK_SEQPACKET socketpair.
#include "ipc/zygote_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace torchfarm::ipc {
namespace {

TEST(ZygoteProtocol, LaunchRoundTrips) {
  ZygoteLaunch launch;
  launch.argv = {"/bin/torchfarm-worker", "--model", "m", "--warmup", "[[1,2]]"};
  launch.env = {"CUDA_MPS_PIPE_DIRECTORY=/tmp/x"};
  launch.targets = {3, 4, 1, 2};
  launch.supervisor = 1234;
  ZygoteLaunch back;
  ASSERT_TRUE(DecodeZygoteLaunch(EncodeZygoteLaunch(launch), &back).ok());
  EXPECT_EQ(back.argv, launch.argv);
  EXPECT_EQ(back.env, launch.env);
  EXPECT_EQ(back.targets, launch.targets);
  EXPECT_EQ(back.supervisor, 1234);
}

TEST(ZygoteProtocol, ForkZygoteRoundTrips) {
  ZygoteLaunch request;
  request.zygote = true;
  request.supervisor = 4321;
  const std::string text = EncodeZygoteLaunch(request);
  EXPECT_NE(text.find("fork_zygote"), std::string::npos) << text;
  ZygoteLaunch back;
  back.argv = {"left over"};
  ASSERT_TRUE(DecodeZygoteLaunch(text, &back).ok());
  EXPECT_TRUE(back.zygote);
  EXPECT_EQ(back.supervisor, 4321);
  EXPECT_TRUE(back.argv.empty() && back.env.empty() && back.targets.empty());
  EXPECT_FALSE(DecodeZygoteLaunch(R"({"type":"fork_zygote"})", &back).ok()) << "no supervisor";
}

TEST(ZygoteProtocol, MalformedLaunchesAreRefusedWithTheReason) {
  ZygoteLaunch out;
  for (const char* bad : {"", "{", "[]", R"({"type":"launch"})", R"({"type":"other"})",
                          R"({"type":"launch","argv":[],"env":[],"targets":[],"supervisor":1})",
                          R"({"type":"launch","argv":"x","env":[],"targets":[],"supervisor":1})"}) {
    Status s = DecodeZygoteLaunch(bad, &out);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("zygote"), std::string::npos) << s.message();
  }
}

TEST(ZygoteProtocol, PacketsCarryDescriptors) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_TRUE(SendPacket(pair[0], "hello", {pipe_fds[1]}).ok());
  std::string payload;
  std::vector<int> fds;
  ASSERT_TRUE(ReceivePacket(pair[1], 1000, &payload, &fds).ok());
  EXPECT_EQ(payload, "hello");
  ASSERT_EQ(fds.size(), 1u);
  // The received descriptor is the pipe's write end: what goes in comes out of the read end.
  ASSERT_EQ(::write(fds[0], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  for (int fd : {fds[0], pipe_fds[0], pipe_fds[1]}) ::close(fd);
  // No packet: DeadlineExceeded (alive but silent); a closed peer: Unavailable, for a receive
  // and a send alike.
  Status s = ReceivePacket(pair[1], 10, &payload, &fds);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  ::close(pair[0]);
  s = ReceivePacket(pair[1], 1000, &payload, &fds);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s.message();
  s = SendPacket(pair[1], "late");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
  ::close(pair[1]);
  std::vector<int> too_many(kZygoteMaxFds + 1, 0);
  EXPECT_FALSE(SendPacket(-1, "x", too_many).ok());
}

}  // namespace
}  // namespace torchfarm::ipc
