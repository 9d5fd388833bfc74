// IpcEndpointFile removes only the socket file its process bound, and only while the path still
// names it; CheckIpcEndpointFree refuses a path a live process listens on.
#include "supervisor/loop/ipc_endpoint_file.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

namespace torchfarm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class IpcEndpointFileTest : public ::testing::Test {
 protected:
  IpcEndpointFileTest() : dir_("/tmp/tf-ipcfile-" + std::to_string(::getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~IpcEndpointFileTest() override { fs::remove_all(dir_); }

  zmq::socket_t Bind(const std::string& endpoint) {
    zmq::socket_t socket(context_, zmq::socket_type::router);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(endpoint);
    return socket;
  }

  std::string dir_;
  zmq::context_t context_{1};
};

TEST_F(IpcEndpointFileTest, PathsOfIpcEndpointsOnly) {
  EXPECT_EQ(IpcEndpointPath("ipc:///run/x.sock"), "/run/x.sock");
  EXPECT_EQ(IpcEndpointPath("ipc://@abstract"), "");
  EXPECT_EQ(IpcEndpointPath("ipc://*"), "");
  EXPECT_EQ(IpcEndpointPath("tcp://127.0.0.1:5555"), "");
  EXPECT_FALSE(IpcEndpointFile::Bound("tcp://127.0.0.1:5555").owns_file());
}

TEST_F(IpcEndpointFileTest, TheProcessThatBoundRemovesItsFile) {
  const std::string endpoint = "ipc://" + dir_ + "/a.sock";
  zmq::socket_t socket = Bind(endpoint);
  {
    IpcEndpointFile file = IpcEndpointFile::Bound(endpoint);
    EXPECT_TRUE(file.owns_file());
    IpcEndpointFile moved = std::move(file);
    EXPECT_FALSE(file.owns_file());
    EXPECT_TRUE(fs::exists(dir_ + "/a.sock"));
  }
  EXPECT_FALSE(fs::exists(dir_ + "/a.sock"));
}

TEST_F(IpcEndpointFileTest, AFileThatWasNeverBoundHereStays) {
  const std::string endpoint = "ipc://" + dir_ + "/live.sock";
  zmq::socket_t live = Bind(endpoint);
  { IpcEndpointFile refused; }  // a supervisor refused before its bind
  EXPECT_TRUE(fs::exists(dir_ + "/live.sock"));
}

TEST_F(IpcEndpointFileTest, AFileReplacedByAnotherBindStays) {
  const std::string endpoint = "ipc://" + dir_ + "/b.sock";
  zmq::socket_t first = Bind(endpoint);
  IpcEndpointFile file = IpcEndpointFile::Bound(endpoint);
  first.close();
  // Once the old listener is gone (libzmq closes it on its I/O thread), the file system may hand
  // the second bind's file the inode the first one had: the change time must tell them apart.
  for (int i = 0; i < 200 && !CheckIpcEndpointFree(endpoint).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  zmq::socket_t second = Bind(endpoint);  // libzmq unlinks the old file and makes a new one
  file.Remove();
  EXPECT_TRUE(fs::exists(dir_ + "/b.sock")) << "the newer owner's file was removed";
}

TEST_F(IpcEndpointFileTest, ALiveListenerIsNotFree) {
  const std::string endpoint = "ipc://" + dir_ + "/c.sock";
  EXPECT_TRUE(CheckIpcEndpointFree(endpoint).ok()) << "no file yet";
  zmq::socket_t socket = Bind(endpoint);
  Status s = CheckIpcEndpointFree(endpoint);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("a live process (another supervisor?) is listening there"));
  // libzmq leaves the file of a closed listener behind: a stale file is free. (Its I/O thread
  // closes the listener after close() returns.)
  socket.close();
  ASSERT_TRUE(fs::exists(dir_ + "/c.sock"));
  bool free = false;
  for (int i = 0; i < 100 && !free; ++i) {
    free = CheckIpcEndpointFree(endpoint).ok();
    if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(free);
  EXPECT_TRUE(CheckIpcEndpointFree("tcp://127.0.0.1:1").ok());
}

TEST_F(IpcEndpointFileTest, AFileThatIsNoSocketIsNotFree) {
  std::ofstream(dir_ + "/notes.txt") << "keep me";
  Status s = CheckIpcEndpointFree("ipc://" + dir_ + "/notes.txt");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exists and is not a socket"));
}

}  // namespace
}  // namespace torchfarm
