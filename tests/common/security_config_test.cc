// The security half of the config: which endpoints need CURVE, the admin socket's rules, the
// "limits" block and its defaults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/config.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Minimal() {
  return json::parse(R"({
    "models": [{"name": "m", "path": "m.pt", "slot_bytes": 1048576,
                "inputs": [{"dtype": "float32", "shape": [-1, 4]}]}]
  })");
}

json Curve() {
  return {{"secret_key_file", "keys/server.key_secret"}, {"authorized_clients_dir", "clients"}};
}

Status ParseSecurityConfig(const json& j, FarmConfig* c) { return ParseConfig(j, "/base", c); }

std::string Error(const json& j) {
  FarmConfig c;
  Status s = ParseSecurityConfig(j, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j.dump();
  return s.message();
}

TEST(SecurityConfigTest, LocalEndpoints) {
  for (const char* local :
       {"ipc:///tmp/x.sock", "inproc://x", "tcp://127.0.0.1:5555", "tcp://127.1.2.3:1",
        "tcp://localhost:5555", "tcp://[::1]:5555", "tcp://lo:5555"}) {
    EXPECT_TRUE(IsLocalEndpoint(local)) << local;
  }
  for (const char* remote :
       {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.1:5555", "tcp://eth0:5555",
        "tcp://[::]:5555", "tcp://128.0.0.1:5555", "tcp://127.0.0.1.evil:5555",
        "tcp://127.0.0.1:5555;10.0.0.1:5", "ws://127.0.0.1:5555", "pgm://eth0;239.1.1.1:5555",
        "tcp://localhost.example.com:1"}) {
    EXPECT_FALSE(IsLocalEndpoint(remote)) << remote;
  }
}

TEST(SecurityConfigTest, NetworkEndpointWithoutCurveIsRefused) {
  json j = Minimal();
  j["endpoint"] = "tcp://0.0.0.0:5555";
  std::string message = Error(j);
  EXPECT_THAT(message, HasSubstr("config.endpoint: \"tcp://0.0.0.0:5555\" is reachable from the "
                                 "network but \"curve\" is not configured"));
  EXPECT_THAT(message, HasSubstr("\"insecure\": true"));
}

TEST(SecurityConfigTest, InsecureOrCurveAllowsANetworkEndpoint) {
  json j = Minimal();
  j["endpoint"] = "tcp://*:5555";
  j["insecure"] = true;
  FarmConfig c;
  ASSERT_TRUE(ParseSecurityConfig(j, &c).ok());
  EXPECT_TRUE(c.insecure);
  EXPECT_FALSE(c.curve.enabled());

  j.erase("insecure");
  j["curve"] = Curve();
  Status s = ParseSecurityConfig(j, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.curve.enabled());
  EXPECT_EQ(c.curve.secret_key_file, "/base/keys/server.key_secret");
  EXPECT_EQ(c.curve.authorized_clients_dir, "/base/clients");

  j["insecure"] = "yes";
  EXPECT_THAT(Error(j), HasSubstr("config.insecure: expected true or false"));
}

TEST(SecurityConfigTest, CurveKeysAreCheckedByName) {
  json j = Minimal();
  j["curve"] = {{"secret_key_file", "s"}};
  EXPECT_THAT(Error(j), HasSubstr("config.curve.authorized_clients_dir: required string"));
  j["curve"] = Curve();
  j["curve"]["public_key"] = "x";
  EXPECT_THAT(Error(j), HasSubstr("config.curve: unknown key 'public_key'"));
}

TEST(SecurityConfigTest, AdminEndpointRules) {
  json j = Minimal();
  j["admin_endpoint"] = "tcp://0.0.0.0:6000";
  j["insecure"] = true;  // never enough for the admin socket
  EXPECT_THAT(Error(j), HasSubstr("config.admin_endpoint: \"tcp://0.0.0.0:6000\" must be "
                                  "ipc://PATH or a loopback tcp:// endpoint with \"curve\""));
  j["admin_endpoint"] = "tcp://127.0.0.1:6000";
  EXPECT_THAT(Error(j), HasSubstr("config.admin_endpoint: tcp endpoint \"tcp://127.0.0.1:6000\" "
                                  "needs \"curve\""));
  j["admin_endpoint"] = "ws://127.0.0.1:6000";
  EXPECT_THAT(Error(j), HasSubstr("must be ipc://PATH"));
  j["admin_endpoint"] = "tcp://127.0.0.1:6000";
  j["curve"] = Curve();
  FarmConfig c;
  EXPECT_TRUE(ParseSecurityConfig(j, &c).ok());
  j["admin_endpoint"] = "tcp://127.0.0.1:5555";  // the job endpoint
  EXPECT_THAT(Error(j), HasSubstr("must differ from endpoint"));
}

TEST(SecurityConfigTest, IpcGroupNeedsAnIpcEndpoint) {
  json j = Minimal();
  j["ipc_group"] = "torchfarm";
  EXPECT_THAT(Error(j), HasSubstr("config.ipc_group: applies to an ipc:// endpoint only"));
  j["endpoint"] = "ipc:///run/tf/jobs.sock";
  FarmConfig c;
  ASSERT_TRUE(ParseSecurityConfig(j, &c).ok());
  EXPECT_EQ(c.ipc_group, "torchfarm");
}

TEST(SecurityConfigTest, LimitsDefaults) {
  FarmConfig c;
  ASSERT_TRUE(ParseSecurityConfig(Minimal(), &c).ok());
  EXPECT_EQ(c.limits.request.max_header_bytes, 65536u);
  EXPECT_EQ(c.limits.request.max_inputs, 16u);
  EXPECT_EQ(c.limits.request.max_rank, 8);
  // Derived: the largest ring slot plus a header.
  EXPECT_EQ(c.limits.request.max_request_bytes, 1048576u + 65536u);
  EXPECT_EQ(c.limits.request.max_tensor_bytes, 1048576u + 65536u);
  EXPECT_EQ(c.limits.max_queued_per_client, 256);
}

TEST(SecurityConfigTest, LimitsExplicit) {
  json j = Minimal();
  j["limits"] = {{"max_header_bytes", 4096},  {"max_frames", 3},
                 {"max_tensor_bytes", 1000},  {"max_rank", 4},
                 {"max_request_bytes", 5000}, {"max_queued_per_client", 8}};
  FarmConfig c;
  ASSERT_TRUE(ParseSecurityConfig(j, &c).ok());
  EXPECT_EQ(c.limits.request.max_header_bytes, 4096u);
  EXPECT_EQ(c.limits.request.max_inputs, 2u);
  EXPECT_EQ(c.limits.request.max_tensor_bytes, 1000u);
  EXPECT_EQ(c.limits.request.max_rank, 4);
  EXPECT_EQ(c.limits.request.max_request_bytes, 5000u);
  EXPECT_EQ(c.limits.max_queued_per_client, 8);
}

TEST(SecurityConfigTest, LimitsErrorsNameTheKey) {
  json j = Minimal();
  j["limits"] = {{"max_rank", 9}};
  EXPECT_THAT(Error(j), HasSubstr("config.limits.max_rank: expected an integer in 0..8, got"));
  j["limits"] = {{"max_frames", 1}};
  EXPECT_THAT(Error(j), HasSubstr("config.limits.max_frames: expected an integer in 2..1025"));
  j["limits"] = {{"max_queue", 1}};
  EXPECT_THAT(Error(j), HasSubstr("config.limits: unknown key 'max_queue'"));
  j["limits"] = {{"max_queued_per_client", 0}};
  EXPECT_THAT(Error(j), HasSubstr("config.limits.max_queued_per_client"));
  j["limits"] = 5;
  EXPECT_THAT(Error(j), HasSubstr("config.limits: expected an object"));
}

}  // namespace
}  // namespace torchfarm
