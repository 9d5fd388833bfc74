// CURVE on the job socket: an unauthenticated client (no CURVE, or a key the supervisor does not
// list) gets no service; an authorized one is served; SIGHUP rereads the authorized folder; the
// keys come from `torchfarm keygen`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/curve_keys.h"
#include "security_util.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

class CurveTest : public ::testing::Test {
 protected:
  CurveTest() : keys_("/tmp/tf-curve-" + std::to_string(::getpid())) {
    fs::remove_all(keys_);
    fs::create_directories(keys_ + "/authorized");
  }
  ~CurveTest() override { fs::remove_all(keys_); }

  // Runs `torchfarm keygen --out keys_/name`; returns its exit code.
  int Keygen(const std::string& name) {
    std::string cmd = BinDir() + "/torchfarm keygen --out " + keys_ + "/" + name + " > " + keys_ +
                      "/" + name + ".out 2>&1";
    return WEXITSTATUS(std::system(cmd.c_str()));
  }

  ClientSecurity Security(const std::string& client) {
    ClientSecurity security;
    Status s = ClientSecurity::FromFiles(keys_ + "/server.key",
                                         keys_ + "/" + client + ".key_secret", &security);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return security;
  }

  static Status Ping(Client& client) {
    std::vector<int32_t> row = {4, 5, 6};
    InferResult result;
    Status s =
        client.Infer("identity", {TensorView{{DType::kInt32, {1, 3}}, row.data(), 12}}, &result);
    if (s.ok() &&
        result.outputs.at(0).data != std::string(reinterpret_cast<char*>(row.data()), 12)) {
      return Internal("wrong output");
    }
    return s;
  }

  std::string keys_;
};

TEST_F(CurveTest, KeygenWritesAPrivateSecretAndAPublicKey) {
  ASSERT_EQ(Keygen("k"), 0) << ReadFile(keys_ + "/k.out");
  struct stat st {};
  ASSERT_EQ(::stat((keys_ + "/k.key_secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string public_key;
  ASSERT_TRUE(ReadCurveKeyFile(keys_ + "/k.key", &public_key).ok());
  EXPECT_THAT(ReadFile(keys_ + "/k.out"), HasSubstr(public_key)) << "printed on stdout";
  EXPECT_NE(Keygen("k"), 0) << "an existing secret key is never overwritten";
}

TEST_F(CurveTest, OnlyAuthorizedClientsAreServedAndSighupReloads) {
  ASSERT_EQ(Keygen("server"), 0);
  ASSERT_EQ(Keygen("alice"), 0);
  ASSERT_EQ(Keygen("mallory"), 0);
  fs::copy_file(keys_ + "/alice.key", keys_ + "/authorized/alice.key");
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(FreePort());
  Farm farm(json::array({IdentityModel(1)}),
            {{"endpoint", endpoint},
             {"curve",
              {{"secret_key_file", keys_ + "/server.key_secret"},
               {"authorized_clients_dir", keys_ + "/authorized"}}}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();

  Client alice(endpoint, Security("alice"), 10'000);
  EXPECT_TRUE(Ping(alice).ok());

  Client plain(endpoint, 1'500);  // no CURVE at all
  EXPECT_EQ(Ping(plain).code(), StatusCode::kDeadlineExceeded);
  Client mallory(endpoint, Security("mallory"), 1'500);  // a key nobody authorized
  EXPECT_EQ(Ping(mallory).code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(ReadFile(farm.dir() + "/supervisor.log"),
              HasSubstr("refused a CURVE client with an unknown key"));

  fs::copy_file(keys_ + "/mallory.key", keys_ + "/authorized/mallory.key");
  ::kill(farm.pid(), SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Client mallory_now(endpoint, Security("mallory"), 10'000);
  EXPECT_TRUE(Ping(mallory_now).ok()) << "SIGHUP rereads authorized_clients_dir";
  EXPECT_TRUE(Ping(alice).ok());
  EXPECT_EQ(farm.Stop(), 0);
}

TEST_F(CurveTest, ReadableServerSecretKeyIsRefusedAtStart) {
  ASSERT_EQ(Keygen("server"), 0);
  ::chmod((keys_ + "/server.key_secret").c_str(), 0644);
  Farm farm(json::array({IdentityModel(1)}),
            {{"endpoint", "tcp://127.0.0.1:" + std::to_string(FreePort())},
             {"curve",
              {{"secret_key_file", keys_ + "/server.key_secret"},
               {"authorized_clients_dir", keys_ + "/authorized"}}}});
  ASSERT_TRUE(farm.Start());
  EXPECT_FALSE(farm.WaitReady(-1, 10'000));
  EXPECT_THAT(ReadFile(farm.dir() + "/supervisor.log"),
              HasSubstr("group and others must not read it"));
}

}  // namespace
}  // namespace torchfarm::testing
