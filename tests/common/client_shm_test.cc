// Client shared memory (docs/protocol.md, "Shared-memory tensors (same host)") against a scripted
// in-test ROUTER server that plays the supervisor: it creates real POSIX shared-memory objects for
// shm_create, so the client maps them as it would a supervisor's. No supervisor, no workers.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>

#include "fake_server.h"
#include "torchfarm/client.h"
#include "torchfarm/multi_client.h"
#include "torchfarm/shm_region.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using testing::FakeServer;
using ::testing::HasSubstr;
using testing::kServerWaitMs;
using testing::View;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

std::string UniqueName() {
  static std::atomic<int> counter{0};
  return "/torchfarm-client-shm-test-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

// A shared-memory object made the way the supervisor makes one (zero-filled, mode 0600), mapped
// here too so the test can read and write what the "supervisor" sees. Unlinked on destruction.
class ServerObject {
 public:
  explicit ServerObject(uint64_t bytes, uint64_t truncate_to = 0) : name_(UniqueName()) {
    int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(truncate_to ? truncate_to : bytes)), 0);
    size_ = truncate_to ? truncate_to : bytes;
    base_ =
        static_cast<uint8_t*>(::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
  }
  ~ServerObject() {
    ::munmap(base_, size_);
    ::shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  uint8_t* data() { return base_; }

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

// Answers one shm_create with `name` (and `bytes` as announced), checking the command's header.
void AnswerCreate(FakeServer& s, const std::string& name, uint64_t bytes) {
  FakeServer::Request r;
  ASSERT_TRUE(s.Receive(&r));
  EXPECT_EQ(
      r.header,
      (json{{"v", 1}, {"id", r.header["id"]}, {"op", "shm_create"}, {"bytes", r.header["bytes"]}}));
  EXPECT_TRUE(r.data.empty());
  RequestHeader parsed;  // what the client sends is what the supervisor accepts
  EXPECT_TRUE(ParseRequestHeader(r.header.dump(), &parsed).ok()) << r.header.dump();
  s.Reply(r.identity, MakeShmCreatedReply(r.header["id"], kToken, name, bytes));
}

// Answers one shm_release of kToken; returns false when none came.
bool AnswerRelease(FakeServer& s, int timeout_ms = kServerWaitMs) {
  FakeServer::Request r;
  if (!s.Receive(&r, timeout_ms)) return false;
  EXPECT_EQ(r.header,
            (json{{"v", 1}, {"id", r.header["id"]}, {"op", "shm_release"}, {"region", kToken}}));
  s.Reply(r.identity, MakeShmReleasedReply(r.header["id"]));
  return true;
}

TEST(ClientShmTest, CreateShmMapsTheRegionAndReleaseSendsShmRelease) {
  ServerObject object(4096);
  std::atomic<bool> second_release{false};
  auto server = std::make_unique<FakeServer>([&](FakeServer& s) {
    AnswerCreate(s, object.name(), 4096);
    ASSERT_TRUE(AnswerRelease(s));
    second_release = AnswerRelease(s, 200);
  });
  Client client(server->endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  Status s = client.CreateShm(4096, &region);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(region->token(), kToken);
  EXPECT_EQ(region->name(), object.name());
  EXPECT_EQ(region->size(), 4096u);
  region->data()[100] = 42;  // one memory: what the client writes, the supervisor sees
  EXPECT_EQ(object.data()[100], 42);
  object.data()[200] = 7;
  EXPECT_EQ(region->data()[200], 7);
  EXPECT_TRUE(region->Release().ok());
  EXPECT_TRUE(region->released());
  EXPECT_TRUE(region->Release().ok()) << "a second Release does nothing";
  EXPECT_EQ(region->data()[100], 42) << "the mapping outlives Release";
  server.reset();  // joins the script
  EXPECT_FALSE(second_release);
}

TEST(ClientShmTest, InputsAndOutputsInARegionTravelWithoutDataFrames) {
  ServerObject object(1 << 16);
  RequestHeader seen;
  size_t seen_frames = 99;
  FakeServer server([&](FakeServer& s) {
    AnswerCreate(s, object.name(), 1 << 16);
    FakeServer::Request r;
    ASSERT_TRUE(s.Receive(&r));
    ASSERT_TRUE(ParseRequestHeader(r.header.dump(), &seen).ok()) << r.header.dump();
    seen_frames = r.data.size();
    // The "model" returns both inputs; outputs are placed as the supervisor places them.
    std::vector<uint64_t> offsets;
    ASSERT_TRUE(PlaceOutputs(seen.inputs, seen.output_shm, &offsets).ok());
    std::memcpy(object.data() + offsets[0], object.data() + seen.input_shm[0].offset, 6 * 4);
    std::memcpy(object.data() + offsets[1], r.data[0].data(), r.data[0].size());
    s.Reply(r.identity,
            MakeOkReply(r.header["id"], seen.inputs, StageTimes{1, 2, 3}, 0, kToken, &offsets));
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  ASSERT_TRUE(client.CreateShm(1 << 16, &region).ok());
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {7, 8};
  TensorView in_region;
  ASSERT_TRUE(region->Write(View(a, DType::kFloat32, {2, 3}), 128, &in_region).ok());
  InferOptions options;
  ASSERT_TRUE(region->Output(4096, 4096, &options.output_shm).ok());
  InferResult result;
  Status s = client.Infer("m", {in_region, View(b, DType::kInt64, {2})}, &result, options);
  ASSERT_TRUE(s.ok()) << s.ToString();

  ASSERT_EQ(seen.input_shm.size(), 2u);
  EXPECT_EQ(seen.input_shm[0].region, kToken);
  EXPECT_EQ(seen.input_shm[0].offset, 128u);
  EXPECT_FALSE(seen.input_shm[1].used()) << "the second input is a data frame";
  EXPECT_EQ(seen_frames, 1u);
  EXPECT_EQ(seen.output_shm.region, kToken);
  EXPECT_EQ(seen.output_shm.offset, 4096u);
  EXPECT_EQ(seen.output_shm.bytes, 4096u);

  EXPECT_TRUE(result.outputs.empty()) << "no owned data";
  ASSERT_EQ(result.header.output_shm.size(), 2u);
  EXPECT_EQ(result.header.output_shm[0].offset, 4096u);
  EXPECT_EQ(result.header.output_shm[1].offset, 4096u + 64u);
  EXPECT_EQ(std::memcmp(region->data() + 4096, a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(region->data() + 4096 + 64, b.data(), 16), 0);
}

// A script answering each request with `reply(request)` as header and no data frames.
FakeServer::Script AnswerEach(ServerObject& object, int requests,
                              std::function<std::string(const FakeServer::Request&)> reply) {
  return [&object, requests, reply](FakeServer& s) {
    AnswerCreate(s, object.name(), 1 << 12);
    for (int i = 0; i < requests; ++i) {
      FakeServer::Request r;
      ASSERT_TRUE(s.Receive(&r));
      s.Reply(r.identity, reply(r));
    }
  };
}

std::string OkAt(const FakeServer::Request& r, const std::string& region, uint64_t offset) {
  std::vector<TensorSpec> outputs = {{DType::kFloat32, {4}}};
  std::vector<uint64_t> offsets = {offset};
  return MakeOkReply(r.header["id"], outputs, {}, 0, region, &offsets);
}

TEST(ClientShmTest, OutputsOutsideTheRequestsRangeAreMalformed) {
  ServerObject object(1 << 12);
  FakeServer server(AnswerEach(object, 3, [](const FakeServer::Request& r) {
    const uint64_t id = r.header["id"];
    if (id == 2) return OkAt(r, kToken, 1024 - 8);                         // ends past the range
    if (id == 3) return OkAt(r, "ffffffffffffffffffffffffffffffff", 512);  // another region
    return OkAt(r, kToken, 512);  // no output_shm was asked for
  }));
  Client client(server.endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  ASSERT_TRUE(client.CreateShm(1 << 12, &region).ok());
  std::vector<float> a = {1, 2, 3, 4};
  InferOptions options;
  ASSERT_TRUE(region->Output(512, 512, &options.output_shm).ok());
  InferResult result;
  for (int request = 2; request <= 3; ++request) {
    Status s = client.Infer("m", {View(a, DType::kFloat32, {4})}, &result, options);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_THAT(s.message(), HasSubstr("expected inside output_shm [512, 1024) of region '" +
                                       std::string(kToken) + "'"));
  }
  Status s = client.Infer("m", {View(a, DType::kFloat32, {4})}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "malformed reply: outputs in shared memory, but the request named no output_shm");
}

TEST(ClientShmTest, PipelinedRepliesAreCheckedAgainstTheirOwnRange) {
  ServerObject object(1 << 12);
  FakeServer server([&](FakeServer& s) {
    AnswerCreate(s, object.name(), 1 << 12);
    FakeServer::Request first, second;
    ASSERT_TRUE(s.Receive(&first));
    ASSERT_TRUE(s.Receive(&second));
    s.Reply(second.identity, OkAt(second, kToken, 2048));
    s.Reply(first.identity, OkAt(first, kToken, 2048));  // outside the first request's range
    s.Reply(first.identity, MakeOkReply(first.header["id"], {}, {}, 0), {"frame"});  // dropped
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  ASSERT_TRUE(client.CreateShm(1 << 12, &region).ok());
  std::vector<float> a = {1, 2, 3, 4};
  InferOptions low, high;
  ASSERT_TRUE(region->Output(0, 1024, &low.output_shm).ok());
  ASSERT_TRUE(region->Output(2048, 1024, &high.output_shm).ok());
  uint64_t first = 0, second = 0;
  ASSERT_TRUE(client.Send("m", {View(a, DType::kFloat32, {4})}, low, &first).ok());
  ASSERT_TRUE(client.Send("m", {View(a, DType::kFloat32, {4})}, high, &second).ok());
  InferResult result;
  uint64_t id = 0;
  Status s = client.Receive(&result, &id, kServerWaitMs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(id, second);
  EXPECT_EQ(result.header.output_shm[0].offset, 2048u);
  s = client.Receive(&result, &id, kServerWaitMs);
  EXPECT_EQ(id, first);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(ClientShmTest, AnUnmappableRegionIsReportedAndReleased) {
  const std::string missing = UniqueName();  // never created: as seen from another host
  std::atomic<bool> released{false};
  auto server = std::make_unique<FakeServer>([&](FakeServer& s) {
    AnswerCreate(s, missing, 4096);
    released = AnswerRelease(s);
  });
  Client client(server->endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  Status s = client.CreateShm(4096, &region);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cannot open shared-memory region " + missing));
  EXPECT_THAT(s.message(), HasSubstr("works only on the supervisor's host"));
  EXPECT_EQ(region, nullptr);
  server.reset();  // joins the script
  EXPECT_TRUE(released) << "the unusable region is released at once";
}

TEST(ClientShmTest, MalformedCreateRepliesAreRefusedBeforeMapping) {
  ServerObject small(4096, /*truncate_to=*/1024);
  FakeServer server([&](FakeServer& s) {
    AnswerCreate(s, "/../etc/passwd", 4096);
    AnswerRelease(s);
    AnswerCreate(s, small.name(), 4096);
    AnswerRelease(s);
    FakeServer::Request r;
    ASSERT_TRUE(s.Receive(&r));
    s.Reply(r.identity, MakeShmReleasedReply(r.header["id"]));  // ok, but no "shm"
    ASSERT_TRUE(s.Receive(&r));
    s.Reply(r.identity, MakeErrorReply(r.header["id"],
                                       ResourceExhausted("client_shm.max_regions (64) reached")));
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  Status s = client.CreateShm(4096, &region);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("'/../etc/passwd' is not a plain object name"));
  s = client.CreateShm(4096, &region);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("holds 1024 bytes, the supervisor announced 4096"));
  s = client.CreateShm(4096, &region);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("malformed reply: shm_create answered no 'shm'"));
  s = client.CreateShm(4096, &region);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "client_shm.max_regions (64) reached");
  EXPECT_EQ(client.CreateShm(0, &region).code(), StatusCode::kInvalidArgument);
}

TEST(ClientShmTest, RegionRangesAreCheckedLocally) {
  ServerObject object(4096);
  FakeServer server([&](FakeServer& s) { AnswerCreate(s, object.name(), 4096); });
  Client client(server.endpoint(), kServerWaitMs);
  std::unique_ptr<ShmRegion> region;
  ASSERT_TRUE(client.CreateShm(4096, &region).ok());
  TensorView view;
  Status s = region->Input({DType::kFloat32, {4}}, 2, &view);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "ShmRegion::Input float32 [4]: offset 2 is not a multiple of 4");
  s = region->Input({DType::kFloat32, {4}}, 4084, &view);
  EXPECT_EQ(s.message(),
            "ShmRegion::Input float32 [4]: 16 bytes at offset 4084 do not fit in "
            "region " +
                object.name() + " of 4096 bytes");
  ASSERT_TRUE(region->Input({DType::kFloat32, {4}}, 4080, &view).ok());
  EXPECT_EQ(view.shm.region, kToken);
  EXPECT_EQ(view.shm.offset, 4080u);
  EXPECT_EQ(view.data, nullptr);
  ShmRef range;
  EXPECT_EQ(region->Output(32, 64, &range).message(),
            "ShmRegion::Output: offset 32 is not a multiple of 64");
  EXPECT_EQ(region->Output(4032, 128, &range).code(), StatusCode::kInvalidArgument);
  std::vector<float> a = {1, 2};
  EXPECT_THAT(region->Write(TensorView{{DType::kFloat32, {3}}, a.data(), 8}, 0, &view).message(),
              HasSubstr("float32 [3] needs 12 bytes of data, got 8"));
  EXPECT_THAT(region->Write(view, 0, &view).message(), HasSubstr("already in shared memory"));
}

TEST(ClientShmTest, MultiClientRefusesSharedMemory) {
  MultiClient client({"tcp://127.0.0.1:9", "tcp://127.0.0.1:10"});
  ASSERT_TRUE(client.connect_status().ok());
  InferOptions options;
  options.output_shm = ShmRef{kToken, 0, 64};
  std::vector<float> a = {1};
  InferResult result;
  Status s = client.Infer("m", {View(a, DType::kFloat32, {1})}, &result, options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("needs a client with one endpoint (torchfarm::Client)"));
  TensorView in_region({DType::kFloat32, {1}}, ShmRef{kToken, 0, 0});
  uint64_t id = 0;
  EXPECT_EQ(client.Send("m", {in_region}, {}, &id).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.outstanding(), 0u);
}

}  // namespace
}  // namespace torchfarm
