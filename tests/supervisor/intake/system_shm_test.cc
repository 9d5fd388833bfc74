// Triton's system shared memory on the loop's side: the key checks and the open
// (system_shm_object.h), ClientShmRegistry's system regions, ParseJob's front-end references
// ("shm" on inputs, "outputs_shm") and the "meta" answers (system_shm_api.h). Objects are real
// POSIX shared memory made by the test; each hostile case is followed by a good one.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/intake/job_intake.h"
#include "supervisor/intake/system_shm_api.h"
#include "supervisor/intake/system_shm_object.h"
#include "tests/supervisor/intake/job_intake_fixture.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A POSIX object of `bytes` bytes, filled with `fill`, removed at the end of the test.
class ShmObject {
 public:
  ShmObject(const std::string& tag, uint64_t bytes, uint8_t fill = 0)
      : key_("/tf-sys-" + std::to_string(::getpid()) + "-" + tag) {
    const int fd = ::shm_open(key_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
    if (bytes > 0) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      std::memset(p, fill, bytes);
      ::munmap(p, bytes);
    }
    ::close(fd);
  }
  ~ShmObject() { ::shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }
  std::string path() const { return "/dev/shm" + key_; }

 private:
  std::string key_;
};

std::string Message(const Status& s) { return s.ok() ? "OK" : s.message(); }

TEST(SystemShmKeyTest, OnlyASlashAndAName) {
  EXPECT_TRUE(CheckSystemShmKey("/input_data").ok());
  EXPECT_EQ(Message(CheckSystemShmKey("")),
            "key: expected a shared-memory key of the form \"/name\" (one leading slash and no "
            "other, as shm_open takes it; not a path), got an empty key");
  for (const char* bad : {"input", "/", "/a/b", "/../etc/passwd", "/..", "/.", "//x", "/x/"}) {
    EXPECT_THAT(Message(CheckSystemShmKey(bad)),
                HasSubstr("expected a shared-memory key of the form \"/name\""))
        << bad;
  }
  EXPECT_THAT(Message(CheckSystemShmKey("/" + std::string(256, 'a'))),
              HasSubstr("of at most 255 bytes, got 256"));
  EXPECT_TRUE(CheckSystemShmKey("/" + std::string(255, 'a')).ok());
  EXPECT_THAT(Message(CheckSystemShmKey(std::string("/a\0b", 4))), HasSubstr("of the form"));
}

TEST(SystemShmObjectTest, HostileObjectsAreRefusedThenAGoodOneMaps) {
  ShmObject good("good", 4096, 7);
  ShmObject small("small", 64);
  const std::string link = "/dev/shm/tf-sys-" + std::to_string(::getpid()) + "-link";
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(good.path().c_str(), link.c_str()), 0);
  const std::string fifo = "/dev/shm/tf-sys-" + std::to_string(::getpid()) + "-fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const uid_t me = ::geteuid();
  std::unique_ptr<ipc::SharedRegion> region;

  EXPECT_THAT(Message(OpenSystemShmObject(link.substr(8), 0, 64, me, kShmDirectory, &region)),
              HasSubstr("is a symbolic link; expected a shared-memory object"));
  EXPECT_THAT(Message(OpenSystemShmObject(fifo.substr(8), 0, 64, me, kShmDirectory, &region)),
              HasSubstr("is not a regular file"));
  EXPECT_THAT(
      Message(OpenSystemShmObject("/../shm" + good.key(), 0, 64, me, kShmDirectory, &region)),
      HasSubstr("of the form \"/name\""));
  EXPECT_EQ(OpenSystemShmObject(good.key() + "-gone", 0, 64, me, kShmDirectory, &region).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Message(OpenSystemShmObject(small.key(), 8, 64, me, kShmDirectory, &region)),
            "key '" + small.key() +
                "': offset 8 + byte_size 64 = 72 runs past the end of the object (64 bytes)");
  EXPECT_EQ(Message(OpenSystemShmObject(small.key(), 0, 0, me, kShmDirectory, &region)),
            "byte_size: expected at least 1 byte, got 0");
  EXPECT_EQ(Message(OpenSystemShmObject(good.key(), 0, 64, me + 1, kShmDirectory, &region)),
            "key '" + good.key() + "': the object is owned by uid " + std::to_string(me) +
                "; the supervisor runs as uid " + std::to_string(me + 1) +
                " and maps only its own user's objects");
  EXPECT_EQ(region, nullptr);
  ::unlink(link.c_str());
  ::unlink(fifo.c_str());

  // The good one: the range [100, 100 + 200) of the object, data() at byte 100.
  ASSERT_TRUE(OpenSystemShmObject(good.key(), 100, 200, me, kShmDirectory, &region).ok());
  EXPECT_EQ(region->size(), 200u);
  EXPECT_EQ(region->base_offset(), 100u);
  EXPECT_EQ(region->data()[0], 7);
  EXPECT_EQ(region->data()[199], 7);
  EXPECT_TRUE(region->Covers(0, 200));
  EXPECT_FALSE(region->Covers(1, 200));
  // Truncated under the mapping: Covers counts from the registered offset.
  ASSERT_EQ(::truncate(good.path().c_str(), 150), 0);
  EXPECT_TRUE(region->Covers(0, 50));
  EXPECT_FALSE(region->Covers(0, 51));
  ASSERT_EQ(::truncate(good.path().c_str(), 50), 0);
  EXPECT_FALSE(region->Covers(0, 1));
  EXPECT_EQ(region->CurrentSize(), 50u);
}

class SystemRegistryTest : public ::testing::Test {
 protected:
  SystemRegistryTest() : registry_(ClientShmConfig{}, "torchfarm-test-") {
    registry_.set_budget(&budget_);
  }
  ShmBudget budget_{1 << 20};
  ClientShmRegistry registry_;
};

TEST_F(SystemRegistryTest, RegisterStatusResolveUnregister) {
  ShmObject a("a", 8192, 1);
  ShmObject b("b", 4096, 2);
  ASSERT_TRUE(registry_.RegisterSystem("in", a.key(), 4096, 4096).ok());
  ASSERT_TRUE(registry_.RegisterSystem("out", b.key(), 0, 1024).ok());
  EXPECT_EQ(budget_.used(), 4096u + 1024u);
  std::vector<SystemRegionInfo> status;
  ASSERT_TRUE(registry_.SystemStatus("", &status).ok());
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[0].name, "in");
  EXPECT_EQ(status[0].key, a.key());
  EXPECT_EQ(status[0].offset, 4096u);
  EXPECT_EQ(status[0].byte_size, 4096u);
  ASSERT_TRUE(registry_.SystemStatus("out", &status).ok());
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].byte_size, 1024u);
  EXPECT_EQ(Message(registry_.SystemStatus("nope", &status)),
            "Unable to find system shared memory region: 'nope'");

  EXPECT_EQ(Message(registry_.RegisterSystem("in", b.key(), 0, 16)),
            "shared memory region 'in' already in manager");
  std::shared_ptr<ipc::SharedRegion> region;
  ASSERT_TRUE(registry_.ResolveSystem("in", 4000, 96, "input 'x'", &region).ok());
  EXPECT_EQ(region->data()[4000], 1);
  EXPECT_EQ(Message(registry_.ResolveSystem("in", 4000, 97, "input 'x'", &region)),
            "input 'x': Invalid offset + byte size for shared memory region: 'in': offset 4000 "
            "+ 97 bytes = 4097, the region has 4096 bytes");
  EXPECT_EQ(registry_.ResolveSystem("none", 0, 1, "input 'x'", &region).code(),
            StatusCode::kNotFound);

  // Unregister while a request holds the region: the name goes, the mapping stays for it.
  std::shared_ptr<ipc::SharedRegion> held;
  ASSERT_TRUE(registry_.ResolveSystem("out", 0, 1024, "o", &held).ok());
  ASSERT_TRUE(registry_.UnregisterSystem("out").ok());
  EXPECT_EQ(held->data()[1023], 2);
  EXPECT_EQ(budget_.used(), 4096u);
  EXPECT_EQ(Message(registry_.UnregisterSystem("out")),
            "Unable to find shared memory region: 'out' (it is not registered)");
  // The name is free again.
  ASSERT_TRUE(registry_.RegisterSystem("out", b.key(), 0, 16).ok());
  ASSERT_TRUE(registry_.UnregisterSystem("").ok());
  EXPECT_EQ(registry_.system_regions(), 0u);
  EXPECT_EQ(budget_.used(), 0u);
  // The objects are the client's: never unlinked by the supervisor.
  EXPECT_EQ(::access(a.path().c_str(), F_OK), 0);
}

TEST_F(SystemRegistryTest, RegionsCountAgainstMaxShmBytes) {
  ShmObject big("big", 2 << 20);
  EXPECT_THAT(Message(registry_.RegisterSystem("big", big.key(), 0, (1 << 20) + 1)),
              HasSubstr("limits.max_shm_bytes"));
  EXPECT_EQ(registry_.system_regions(), 0u);
  ASSERT_TRUE(registry_.RegisterSystem("big", big.key(), 0, 1 << 20).ok());  // at the limit
  EXPECT_THAT(Message(registry_.RegisterSystem("one", big.key(), 0, 1)),
              HasSubstr("limits.max_shm_bytes"));
}

// ParseJob for a front-end request: system names, any offset, outputs_shm.
class SystemIntakeTest : public SystemRegistryTest {
 protected:
  SystemIntakeTest() {
    ModelConfig model;
    model.name = "m";
    model.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    model.slot_bytes = 1 << 20;
    models_.push_back(model);
  }
  Status Run(const std::string& header, const std::vector<size_t>& frames, bool front_end,
             PendingRequest* request) {
    std::vector<zmq::message_t> message;
    message.emplace_back(std::string("client"));
    message.emplace_back(header);
    for (size_t n : frames) message.emplace_back(n);
    size_t start = 0;
    EXPECT_TRUE(SplitEnvelope(message, request, &start));
    size_t index = 0;
    return ParseJob(message, start, models_, TimePoint{}, request, &index, RequestLimits{},
                    &registry_, nullptr, {}, front_end);
  }
  std::vector<ModelConfig> models_;
};

TEST_F(SystemIntakeTest, FrontEndInputsAndOutputsNameRegisteredRegions) {
  ShmObject object("io", 4096, 3);
  ASSERT_TRUE(registry_.RegisterSystem("io", object.key(), 1000, 1000).ok());
  const std::string input =
      R"({"v":1,"model":"m","inputs":[{"name":"INPUT__0","dtype":"float32","shape":[2,4],)"
      R"("shm":{"region":"io","offset":%OFF%}}])";
  auto header = [&](const std::string& offset, const std::string& rest) {
    std::string h = input;
    h.replace(h.find("%OFF%"), 5, offset);
    return h + rest + "}";
  };
  // A lying offset, an unknown name, a job-socket request naming a system region: refused.
  PendingRequest refused;
  EXPECT_EQ(Message(Run(header("970", ""), {}, true, &refused)),
            "input 'INPUT__0': Invalid offset + byte size for shared memory region: 'io': "
            "offset 970 + 32 bytes = 1002, the region has 1000 bytes");
  PendingRequest unknown;
  EXPECT_THAT(Message(Run(R"({"v":1,"model":"m","inputs":[{"name":"INPUT__0","dtype":"float32",)"
                          R"("shape":[2,4],"shm":{"region":"zz","offset":0}}]})",
                          {}, true, &unknown)),
              HasSubstr("Unable to find shared memory region: 'zz'"));
  PendingRequest zmq_request;
  EXPECT_EQ(Run(header("0", ""), {}, false, &zmq_request).code(), StatusCode::kNotFound);
  PendingRequest zmq_places;
  EXPECT_THAT(Message(Run(R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[2,4]}],)"
                          R"("outputs_shm":[{"name":"OUTPUT__0","region":"io","offset":0,)"
                          R"("bytes":32}]})",
                          {32}, false, &zmq_places)),
              HasSubstr("only the v2 front ends' requests place outputs"));

  // Good: an odd offset (no alignment for system regions), the output placed at 500.
  PendingRequest request;
  Status s = Run(header("3", R"(,"outputs_shm":[{"name":"OUTPUT__0","region":"io",)"
                             R"("offset":500,"bytes":32}])"),
                 {}, true, &request);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(request.frames.size(), 1u);
  EXPECT_EQ(request.frames[0].size(), 32u);
  EXPECT_EQ(static_cast<const uint8_t*>(request.frames[0].data())[0], 3);
  ASSERT_EQ(request.output_places.size(), 1u);
  EXPECT_EQ(request.output_places[0].place.ref.offset, 500u);
  EXPECT_TRUE(CheckRegionsIntact(request).ok());
  // Truncated after register: the request fails naming the sizes.
  ASSERT_EQ(::truncate(object.path().c_str(), 1010), 0);
  EXPECT_THAT(Message(CheckRegionsIntact(request)),
              HasSubstr("the region shrank to 1010 bytes after the request was accepted, it "
                        "needs bytes [3, 3 + 32)"));
}

TEST(SystemShmApiTest, OffNamesTheKeyAndOnAnswersEveryCall) {
  ClientShmRegistry registry(ClientShmConfig{}, "torchfarm-test-");
  const json off = SystemShmAnswer(&registry, false, {{"system_shared_memory", "status"}});
  EXPECT_EQ(off["status"], "error");
  EXPECT_EQ(off["code"], "UNAVAILABLE");
  EXPECT_THAT(off["message"].get<std::string>(),
              HasSubstr("set \"frontend\": {\"system_shared_memory\": true}"));
  ShmObject object("api", 128);
  EXPECT_EQ(SystemShmAnswer(&registry, true,
                            {{"system_shared_memory", "register"},
                             {"name", "r"},
                             {"key", object.key()},
                             {"offset", 0},
                             {"byte_size", 128}}),
            json::object());
  const json status = SystemShmAnswer(&registry, true, {{"system_shared_memory", "status"}});
  EXPECT_EQ(status["regions"], json::parse(R"([{"name":"r","key":")" + object.key() +
                                           R"(","offset":0,"byte_size":128}])"));
  const json bad = SystemShmAnswer(&registry, true,
                                   {{"system_shared_memory", "register"},
                                    {"name", "r2"},
                                    {"key", object.key()},
                                    {"offset", -1},
                                    {"byte_size", 1}});
  EXPECT_EQ(bad["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(SystemShmAnswer(&registry, true, {{"system_shared_memory", "unregister"}}),
            json::object());
  EXPECT_EQ(SystemShmAnswer(&registry, true,
                            {{"system_shared_memory", "unregister"}, {"name", "r"}})["code"],
            "NOT_FOUND");
}

}  // namespace
}  // namespace torchfarm
