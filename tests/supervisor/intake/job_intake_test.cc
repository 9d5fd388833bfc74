// ParseJob: every malformed request a client can send is answered with the right code and a
// message naming what was expected and what was received.
#include <gtest/gtest.h>

#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/intake/job_intake_fixture.h"

namespace torchfarm {
namespace {

class JobIntakeTest : public ::testing::Test {
 protected:
  JobIntakeTest() {
    ModelConfig mlp;
    mlp.name = "mlp";
    mlp.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    mlp.slot_bytes = 4096;
    ModelConfig pair;
    pair.name = "pair";
    pair.inputs = {TensorSpec{DType::kFloat32, {-1, 2}}, TensorSpec{DType::kInt64, {-1}}};
    models_ = {mlp, pair};
  }

  // frames: identity, header, data...
  Status Run(const std::string& header, const std::vector<size_t>& data_sizes,
             PendingRequest* request, size_t* model = nullptr) {
    return RunJob(models_, header, data_sizes, request, model);
  }

  std::vector<ModelConfig> models_;
};

void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& words) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
}

// The v2 front ends speak Triton's priorities (docs/kserve-v2.md): 1 is the highest level, 0 and
// values past priority_levels the model's default_priority_level.
TEST(TritonPriority, MapsToTheFarmsLevels) {
  ModelConfig model;
  model.priority_levels = 3;
  model.default_priority_level = 2;
  EXPECT_EQ(TritonPriorityLevel(0, model), 1);
  EXPECT_EQ(TritonPriorityLevel(1, model), 0);
  EXPECT_EQ(TritonPriorityLevel(2, model), 1);
  EXPECT_EQ(TritonPriorityLevel(3, model), 2);
  EXPECT_EQ(TritonPriorityLevel(4, model), 1);
  EXPECT_EQ(TritonPriorityLevel(1000, model), 1);
  ModelConfig plain;  // one level: everything runs at it
  EXPECT_EQ(TritonPriorityLevel(0, plain), 0);
  EXPECT_EQ(TritonPriorityLevel(1, plain), 0);
  EXPECT_EQ(TritonPriorityLevel(7, plain), 0);
}

TEST_F(JobIntakeTest, ValidRequestIsAccepted) {
  PendingRequest r;
  size_t model = 9;
  Status s = Run(R"({"v":1,"id":"a","model":"pair","inputs":[{"dtype":"float32","shape":[3,2]},)"
                 R"({"dtype":"int64","shape":[3]}],"timeout_ms":50})",
                 {24, 24}, &r, &model);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(model, 1u);
  EXPECT_EQ(r.rows, 3);
  EXPECT_TRUE(r.batchable);
  EXPECT_EQ(r.frames.size(), 2u);
  EXPECT_EQ(r.deadline, TimePoint{} + Millis(50));
  EXPECT_EQ(r.slot_bytes, 64u + 64u);
}

TEST_F(JobIntakeTest, EnvelopeOfAReqClientKeepsItsDelimiter) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("id"));
  frames.emplace_back();
  frames.emplace_back(std::string("{}"));
  PendingRequest r;
  size_t start = 0;
  ASSERT_TRUE(SplitEnvelope(frames, &r, &start));
  EXPECT_TRUE(r.has_delimiter);
  EXPECT_EQ(start, 2u);
}

TEST_F(JobIntakeTest, NotJson) {
  PendingRequest r;
  ExpectError(Run("not json", {16}, &r), StatusCode::kInvalidArgument, {"JSON"});
}

TEST_F(JobIntakeTest, NoHeaderAtAll) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("client"));
  PendingRequest r;
  size_t start = 0;
  ASSERT_TRUE(SplitEnvelope(frames, &r, &start));
  size_t index;
  ExpectError(ParseJob(frames, start, models_, TimePoint{}, &r, &index),
              StatusCode::kInvalidArgument, {"header"});
}

TEST_F(JobIntakeTest, UnknownModelIsNotFoundAndListsServedModels) {
  PendingRequest r;
  Status s = Run(R"({"v":1,"id":7,"model":"nope","inputs":[{"dtype":"float32","shape":[1,4]}]})",
                 {16}, &r);
  ExpectError(s, StatusCode::kNotFound, {"'nope'", "mlp", "pair"});
  EXPECT_EQ(r.id, 7) << "the id is echoed even on errors";
}

// Versions: one ModelConfig per (name, version); "version" pins one, none takes the latest loaded.
class JobIntakeVersionsTest : public ::testing::Test {
 protected:
  JobIntakeVersionsTest() {
    for (const char* version : {"1", "2", "10"}) {
      ModelConfig m;
      m.name = "m";
      m.version = version;
      // Version 10 takes wider rows: a request checks against the version it runs on.
      m.inputs = {TensorSpec{DType::kFloat32, {-1, std::string(version) == "10" ? 8 : 4}}};
      models_.push_back(m);
    }
    ModelConfig other;
    other.name = "other";
    other.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    models_.push_back(other);
  }
  Status Run(const std::string& version_field, int64_t width, size_t* index,
             const std::function<bool(size_t)>& loaded = {}) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(std::string("client"));
    frames.emplace_back(R"({"v":1,"model":"m",)" + version_field +
                        R"("inputs":[{"dtype":"float32","shape":[1,)" + std::to_string(width) +
                        "]}]}");
    frames.emplace_back(static_cast<size_t>(width * 4));
    PendingRequest r;
    size_t start = 0;
    EXPECT_TRUE(SplitEnvelope(frames, &r, &start));
    return ParseJob(frames, start, models_, TimePoint{}, &r, index, RequestLimits{}, nullptr,
                    nullptr, loaded);
  }
  std::vector<ModelConfig> models_;
};

TEST_F(JobIntakeVersionsTest, PinnedRequestsRunOnTheirVersion) {
  size_t index = 99;
  ASSERT_TRUE(Run(R"("version":"2",)", 4, &index).ok());
  EXPECT_EQ(index, 1u);
  ASSERT_TRUE(Run(R"("version":"1",)", 4, &index).ok());
  EXPECT_EQ(index, 0u);
  ExpectError(Run(R"("version":"1",)", 8, &index), StatusCode::kInvalidArgument, {"shape"});
}

TEST_F(JobIntakeVersionsTest, UnpinnedRequestsGetTheLatestLoaded) {
  size_t index = 99;
  ASSERT_TRUE(Run("", 8, &index).ok());
  EXPECT_EQ(index, 2u) << "10 is the latest (numeric order)";
  ASSERT_TRUE(Run(R"("version":null,)", 8, &index).ok());
  EXPECT_EQ(index, 2u);
  ASSERT_TRUE(Run("", 4, &index, [](size_t i) { return i != 2; }).ok());
  EXPECT_EQ(index, 1u) << "version 10 is still loading: 2 is the latest loaded";
}

TEST_F(JobIntakeVersionsTest, UnknownVersionIsNotFoundAndListsTheVersions) {
  size_t index = 99;
  ExpectError(Run(R"("version":"3",)", 4, &index), StatusCode::kNotFound,
              {"model 'm' has no version '3'", "1, 2, 10"});
  ExpectError(Run(R"("version":"",)", 4, &index), StatusCode::kInvalidArgument,
              {"header field 'version'"});
  ExpectError(Run(R"("version":3,)", 4, &index), StatusCode::kInvalidArgument,
              {"header field 'version'"});
}

TEST_F(JobIntakeTest, WrongFrameCount) {
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,4]}]})", {}, &r),
              StatusCode::kInvalidArgument, {"1 input", "0 data frame"});
}

TEST_F(JobIntakeTest, ByteCountNotMatchingDtypeTimesShape) {
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,4]}]})", {15}, &r),
              StatusCode::kInvalidArgument, {"16 bytes", "15"});
}

TEST_F(JobIntakeTest, DtypeRankAndFixedDimMismatchNameExpectedAndGot) {
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float64","shape":[1,4]}]})", {32}, &r),
              StatusCode::kInvalidArgument, {"dtype", "expected float32 [-1, 4]", "got float64 [1, 4]"});
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[4]}]})", {16}, &r),
              StatusCode::kInvalidArgument, {"rank", "got float32 [4]"});
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,5]}]})", {20}, &r),
              StatusCode::kInvalidArgument, {"shape", "expected float32 [-1, 4]", "got float32 [1, 5]"});
}

TEST_F(JobIntakeTest, WrongNumberOfInputsForTheModel) {
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"pair","inputs":[{"dtype":"float32","shape":[1,2]}]})", {8}, &r),
              StatusCode::kInvalidArgument, {"takes 2 input", "got 1"});
}

TEST_F(JobIntakeTest, TensorLargerThanARingSlotIsResourceExhausted) {
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[300,4]}]})", {4800}, &r),
              StatusCode::kResourceExhausted, {"4800", "4096", "slot_bytes"});
}

TEST_F(JobIntakeTest, InputsDisagreeingOnDimZeroAreServedAlone) {
  PendingRequest r;
  Status s = Run(R"({"v":1,"model":"pair","inputs":[{"dtype":"float32","shape":[3,2]},)"
                 R"({"dtype":"int64","shape":[2]}]})",
                 {24, 16}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(r.batchable);
  EXPECT_EQ(r.rows, 1);
}

// now + timeout_ms must never overflow (undefined behaviour; in practice a deadline in the past,
// so the request expired at once): a timeout beyond kMaxTimeoutMs means none.
TEST_F(JobIntakeTest, HugeTimeoutsMeanNoDeadline) {
  const TimePoint start = TimePoint{} + std::chrono::hours(24 * 365);  // a year of uptime
  const std::vector<std::pair<std::string, TimePoint>> cases = {
      {"0", TimePoint::max()},
      {"50", start + Millis(50)},
      {std::to_string(kMaxTimeoutMs), start + Millis(kMaxTimeoutMs)},
      {std::to_string(kMaxTimeoutMs + 1), TimePoint::max()},
      {"10000000000000", TimePoint::max()},  // 317 years: ns overflow
      {std::to_string(INT64_MAX / 1'000'000 + 1), TimePoint::max()},
      {std::to_string(INT64_MAX), TimePoint::max()},
  };
  JobContext context;
  context.now = start;
  for (const auto& [timeout, deadline] : cases) {
    PendingRequest r;
    const std::string header =
        R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,4]}],"timeout_ms":)" +
        timeout + "}";
    Status s = RunJob(models_, header, {16}, &r, nullptr, context);
    ASSERT_TRUE(s.ok()) << timeout << ": " << s.ToString();
    EXPECT_EQ(r.deadline, deadline) << "timeout_ms " << timeout;
  }
  PendingRequest r;
  ExpectError(Run(R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,4]}],)"
                  R"("timeout_ms":9223372036854775808})",
                  {16}, &r),
              StatusCode::kInvalidArgument, {"timeout_ms", "expected an integer in 0..9223372036854775807"});
  // Near the clock's end the sum saturates too.
  EXPECT_EQ(DeadlineAfter(TimePoint::max() - Millis(5), 10), TimePoint::max());
  EXPECT_EQ(DeadlineAfter(TimePoint::max() - Millis(5), 4), TimePoint::max() - Millis(1));
}

// deadline_unix_us: the client's deadline on its wall clock, applied on arrival. Already past:
// DEADLINE_EXCEEDED at once, by how much; nearer than timeout_ms: it rules (and names itself);
// farther, or more than kMaxTimeoutMs ahead: nothing changes.
TEST(ClientDeadline, IsTheNearerDeadlineAndAPastOneIsRefusedAtOnce) {
  const TimePoint now = TimePoint{} + std::chrono::hours(1);
  const int64_t wall = 1'733'550'000'000'000;  // microseconds since the epoch
  PendingRequest r;
  r.deadline = now + Millis(100);  // timeout_ms 100
  ASSERT_TRUE(ApplyClientDeadline(wall + 20'000, wall, now, &r).ok());
  EXPECT_EQ(r.deadline, now + Millis(20));
  EXPECT_TRUE(r.deadline_is_client);

  PendingRequest later;
  later.deadline = now + Millis(10);
  ASSERT_TRUE(ApplyClientDeadline(wall + 20'000, wall, now, &later).ok());
  EXPECT_EQ(later.deadline, now + Millis(10)) << "timeout_ms is nearer";
  EXPECT_FALSE(later.deadline_is_client);

  PendingRequest none;
  ASSERT_TRUE(ApplyClientDeadline(0, wall, now, &none).ok());
  EXPECT_EQ(none.deadline, TimePoint::max());
  ASSERT_TRUE(ApplyClientDeadline(INT64_MAX, wall, now, &none).ok());
  EXPECT_EQ(none.deadline, TimePoint::max()) << "beyond kMaxTimeoutMs: no deadline, no overflow";
  ASSERT_TRUE(ApplyClientDeadline(wall + kMaxTimeoutMs * 1000, wall, now, &none).ok());
  EXPECT_EQ(none.deadline, now + Millis(kMaxTimeoutMs));

  for (const int64_t late_us : {int64_t{0}, int64_t{2'500}, wall - 1}) {
    PendingRequest past;
    const Status s = ApplyClientDeadline(wall - late_us, wall, now, &past);
    ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << late_us;
    EXPECT_EQ(past.deadline, TimePoint::max());
    if (late_us == 2'500) {
      EXPECT_NE(s.message().find("arrived 2.5 ms after its deadline_unix_us (1733549999997500"),
                std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("clocks must agree"), std::string::npos) << s.message();
    }
  }
}

// Through the whole intake: a header whose deadline_unix_us has passed is refused before it is
// queued; one a second ahead is queued with that deadline on the loop's clock.
TEST_F(JobIntakeTest, AClientDeadlineInTheHeaderIsApplied) {
  const std::string base = R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,4]}],)";
  PendingRequest past;
  ExpectError(Run(base + R"("deadline_unix_us":1000000})", {16}, &past),
              StatusCode::kDeadlineExceeded, {"after its deadline_unix_us (1000000", "never ran"});
  PendingRequest ahead;
  const int64_t second_ahead = WallClockMicros() + 1'000'000;
  ASSERT_TRUE(
      Run(base + R"("deadline_unix_us":)" + std::to_string(second_ahead) + "}", {16}, &ahead).ok());
  EXPECT_TRUE(ahead.deadline_is_client);
  EXPECT_GT(ahead.deadline, ahead.received + Millis(900));
  EXPECT_LE(ahead.deadline, ahead.received + Millis(1000));
}

}  // namespace
}  // namespace torchfarm
