// ClientShmRegistry and ParseJob's shared-memory references: regions are real POSIX objects,
// time is passed in.
#include "supervisor/intake/client_shm_registry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/intake/job_intake_fixture.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

std::string DevShm(const std::string& name) { return "/dev/shm" + name; }

class ClientShmRegistryTest : public ::testing::Test {
 protected:
  ClientShmRegistryTest() {
    config_.max_region_bytes = 1 << 20;
    config_.max_total_bytes = 3 << 19;  // 1.5 MiB
    config_.max_regions = 3;
    config_.idle_timeout_s = 10;
    prefix_ = "torchfarm-" + std::to_string(::getpid()) + "-test-";
  }
  ClientShmConfig config_;
  std::string prefix_;
  TimePoint t0_ = TimePoint{} + std::chrono::hours(1);
};

TEST_F(ClientShmRegistryTest, CreatesAPrivateZeroFilledObjectWhoseNameHidesTheToken) {
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion created;
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &created).ok());
  EXPECT_EQ(created.token.size(), 32u);
  EXPECT_EQ(created.name.find(created.token), std::string::npos);
  EXPECT_EQ(created.name.rfind("/" + prefix_, 0), 0u) << created.name;
  struct stat st {};
  ASSERT_EQ(::stat(DevShm(created.name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 4096);
  std::shared_ptr<ipc::SharedRegion> region;
  ASSERT_TRUE(registry.Resolve(created.token, 0, 4096, "x", t0_, &region).ok());
  EXPECT_EQ(region->size(), 4096u);
  EXPECT_EQ(region->data()[4095], 0);
  EXPECT_EQ(registry.regions(), 1u);
  EXPECT_EQ(registry.bytes(), 4096u);
}

TEST_F(ClientShmRegistryTest, ReleaseRemovesTheNameOnceNoRequestHoldsTheRegion) {
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion created;
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &created).ok());
  std::shared_ptr<ipc::SharedRegion> held;
  ASSERT_TRUE(registry.Resolve(created.token, 0, 8, "x", t0_, &held).ok());
  held->data()[0] = 42;
  ASSERT_TRUE(registry.Release(created.token).ok());
  EXPECT_EQ(registry.regions(), 0u);
  EXPECT_EQ(registry.bytes(), 0u);
  // A request still holds it: the name stays (a worker may still open it), the bytes stay.
  EXPECT_EQ(::access(DevShm(created.name).c_str(), F_OK), 0);
  EXPECT_EQ(held->data()[0], 42);
  std::shared_ptr<ipc::SharedRegion> again;
  Status s = registry.Resolve(created.token, 0, 8, "inputs[0].shm", t0_, &again);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0].shm.region: no region with that token"));
  held.reset();
  EXPECT_NE(::access(DevShm(created.name).c_str(), F_OK), 0);
  s = registry.Release(created.token);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST_F(ClientShmRegistryTest, RangesMustLieInsideTheRegion) {
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion created;
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &created).ok());
  std::shared_ptr<ipc::SharedRegion> region;
  EXPECT_TRUE(registry.Resolve(created.token, 4000, 96, "x", t0_, &region).ok());
  Status s = registry.Resolve(created.token, 4000, 97, "output_shm", t0_, &region);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("output_shm: bytes [4000, 4000 + 97) run past the end of the region (4096"));
  s = registry.Resolve(created.token, UINT64_MAX, 2, "x", t0_, &region);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientShmRegistryTest, LimitsNameTheirKey) {
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion a, b, c, d;
  Status s = registry.Create((1 << 20) + 1, "c", t0_, &a);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("client_shm.max_region_bytes"));
  ASSERT_TRUE(registry.Create(1 << 20, "c", t0_, &a).ok());
  s = registry.Create(1 << 20, "c", t0_, &b);
  EXPECT_THAT(s.message(), HasSubstr("client_shm.max_total_bytes"));
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &b).ok());
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &c).ok());
  s = registry.Create(4096, "c", t0_, &d);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("client_shm.max_regions"));
  ASSERT_TRUE(registry.Release(b.token).ok());
  EXPECT_TRUE(registry.Create(4096, "c", t0_, &d).ok());
}

TEST_F(ClientShmRegistryTest, OneClientCannotTakeEveryRegion) {
  config_.max_regions = 10;
  config_.max_regions_per_client = 2;
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion a, b, c;
  ASSERT_TRUE(registry.Create(4096, "greedy", t0_, &a).ok());
  ASSERT_TRUE(registry.Create(4096, "greedy", t0_, &b).ok());
  Status s = registry.Create(4096, "greedy", t0_, &c);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("this client already holds 2 regions"));
  EXPECT_THAT(s.message(), HasSubstr("client_shm.max_regions_per_client"));
  EXPECT_TRUE(registry.Create(4096, "polite", t0_, &c).ok()) << "other clients still get theirs";
  ASSERT_TRUE(registry.Release(a.token).ok());
  EXPECT_TRUE(registry.Create(4096, "greedy", t0_, &a).ok()) << "a release gives the slot back";
}

TEST_F(ClientShmRegistryTest, IdleRegionsExpireAndUseKeepsThemAlive) {
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion used, idle;
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &used).ok());
  ASSERT_TRUE(registry.Create(4096, "c", t0_, &idle).ok());
  std::shared_ptr<ipc::SharedRegion> region;
  ASSERT_TRUE(registry.Resolve(used.token, 0, 1, "x", t0_ + std::chrono::seconds(6), &region).ok());
  region.reset();
  EXPECT_EQ(registry.ExpireIdle(t0_ + std::chrono::seconds(9)), 0);
  EXPECT_EQ(registry.ExpireIdle(t0_ + std::chrono::seconds(10)), 1);
  EXPECT_NE(::access(DevShm(idle.name).c_str(), F_OK), 0);
  EXPECT_EQ(::access(DevShm(used.name).c_str(), F_OK), 0);
  EXPECT_EQ(registry.ExpireIdle(t0_ + std::chrono::seconds(16)), 1);
  EXPECT_EQ(registry.regions(), 0u);
  EXPECT_EQ(registry.expired(), 2u);
}

TEST_F(ClientShmRegistryTest, DisabledRefusesEverything) {
  config_.enabled = false;
  ClientShmRegistry registry(config_, prefix_);
  CreatedRegion created;
  Status s = registry.Create(4096, "c", t0_, &created);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("client_shm.enabled"));
}

TEST_F(ClientShmRegistryTest, DestructionRemovesEveryName) {
  CreatedRegion created;
  {
    ClientShmRegistry registry(config_, prefix_);
    ASSERT_TRUE(registry.Create(4096, "c", t0_, &created).ok());
  }
  EXPECT_NE(::access(DevShm(created.name).c_str(), F_OK), 0);
}

// ParseJob with a registry: shared-memory inputs become frames over the region's bytes.
class ShmIntakeTest : public ClientShmRegistryTest {
 protected:
  ShmIntakeTest() : registry_(config_, prefix_) {
    ModelConfig pair;
    pair.name = "pair";
    pair.inputs = {TensorSpec{DType::kFloat32, {-1, 2}}, TensorSpec{DType::kInt64, {-1}}};
    pair.slot_bytes = 4096;
    models_ = {pair};
    EXPECT_TRUE(registry_.Create(8192, "c", t0_, &created_).ok());
  }

  Status Run(const std::string& header, const std::vector<size_t>& data_sizes,
             PendingRequest* request, ShmCommand* command = nullptr) {
    ShmCommand unused;
    return RunJob(models_, header, data_sizes, request, nullptr,
                  JobContext{RequestLimits{}, &registry_, command ? command : &unused, t0_});
  }

  std::string Token() const { return created_.token; }

  ClientShmRegistry registry_;
  CreatedRegion created_;
  std::vector<ModelConfig> models_;
};

TEST_F(ShmIntakeTest, ShmInputIsAFrameOverTheRegion) {
  PendingRequest r;
  std::string header = R"({"v":1,"id":1,"model":"pair","inputs":[{"dtype":"float32","shape":[3,2],)"
                       R"("shm":{"region":")" + Token() + R"(","offset":256}},{"dtype":"int64","shape":[3]}],)"
                       R"("output_shm":{"region":")" + Token() + R"(","offset":1024,"bytes":512}})";
  Status s = Run(header, {24}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.frames.size(), 2u);
  std::shared_ptr<ipc::SharedRegion> region;
  ASSERT_TRUE(registry_.Resolve(Token(), 0, 0, "x", t0_, &region).ok());
  EXPECT_EQ(r.frames[0].data(), region->data() + 256);
  EXPECT_EQ(r.frames[0].size(), 24u);
  EXPECT_EQ(r.frames[1].size(), 24u);
  EXPECT_EQ(r.slot_bytes, 64u + 64u);
  EXPECT_EQ(r.rows, 3);
  EXPECT_TRUE(r.output_shm.used());
  EXPECT_EQ(r.output_region, region);
  EXPECT_EQ(r.output_shm.offset, 1024u);
}

// Named inputs in reverse order: the shared-memory reference moves with its input.
TEST_F(ShmIntakeTest, NamedInputsKeepTheirShmReferences) {
  PendingRequest r;
  std::string header = R"({"v":1,"id":1,"model":"pair","inputs":[)"
                       R"({"name":"INPUT__1","dtype":"int64","shape":[3]},)"
                       R"({"name":"INPUT__0","dtype":"float32","shape":[3,2],)"
                       R"("shm":{"region":")" + Token() + R"(","offset":256}}]})";
  Status s = Run(header, {24}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0], (TensorSpec{DType::kFloat32, {3, 2}}));
  EXPECT_EQ(r.inputs[1], (TensorSpec{DType::kInt64, {3}}));
  std::shared_ptr<ipc::SharedRegion> region;
  ASSERT_TRUE(registry_.Resolve(Token(), 0, 0, "x", t0_, &region).ok());
  ASSERT_EQ(r.frames.size(), 2u);
  EXPECT_EQ(r.frames[0].data(), region->data() + 256);
  EXPECT_EQ(r.frames[1].size(), 24u);
  ASSERT_EQ(r.input_regions.size(), 2u);
  EXPECT_EQ(r.input_regions[0], region);
  EXPECT_EQ(r.input_regions[1], nullptr);
  ASSERT_EQ(r.input_shm.size(), 2u);
  EXPECT_EQ(r.input_shm[0].offset, 256u);
  EXPECT_FALSE(r.input_shm[1].used());
}

TEST_F(ShmIntakeTest, BadReferencesAreRefusedWithTheirField) {
  PendingRequest r;
  auto input = [&](const std::string& shm) {
    return R"({"v":1,"model":"pair","inputs":[{"dtype":"float32","shape":[1,2],"shm":)" + shm +
           R"(},{"dtype":"int64","shape":[1]}]})";
  };
  Status s = Run(input(R"({"region":"nope","offset":0})"), {8}, &r);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0].shm.region"));
  r = PendingRequest{};
  s = Run(input(R"({"region":")" + Token() + R"(","offset":6})"), {8}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0].shm.offset: expected a multiple of 4"));
  r = PendingRequest{};
  s = Run(input(R"({"region":")" + Token() + R"(","offset":8188})"), {8}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("run past the end of the region (8192 bytes)"));
  r = PendingRequest{};
  // Without a registry (or disabled) any reference is refused, naming the config key.
  s = RunJob(models_, input(R"({"region":")" + Token() + R"(","offset":0})"), {8}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("client_shm.enabled"));
}

TEST_F(ShmIntakeTest, CommandsComeBackAsCommands) {
  PendingRequest r;
  ShmCommand command;
  ASSERT_TRUE(Run(R"({"v":1,"id":9,"op":"shm_create","bytes":100})", {}, &r, &command).ok());
  EXPECT_EQ(command.op, RequestOp::kShmCreate);
  EXPECT_EQ(command.bytes, 100u);
  EXPECT_EQ(r.id, 9);
  r = PendingRequest{};
  Status s = Run(R"({"v":1,"op":"shm_release","region":"x"})", {4}, &r, &command);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("take a header frame only"));
}

}  // namespace
}  // namespace torchfarm
