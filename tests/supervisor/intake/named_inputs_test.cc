// ParseJob with named inputs: any order in, the model's declared order out (specs, names and
// data frames together); unknown, repeated and missing names are refused, listing the model's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/intake/job_intake_fixture.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

class NamedInputsTest : public ::testing::Test {
 protected:
  NamedInputsTest() {
    ModelConfig triple;
    triple.name = "triple";
    triple.inputs = {TensorSpec{DType::kFloat32, {-1, 2}}, TensorSpec{DType::kInt64, {-1}},
                     TensorSpec{DType::kUInt8, {-1, 3}}};
    triple.input_names = {"x", "ids"};  // the third keeps its default, INPUT__2
    ModelConfig unnamed;
    unnamed.name = "unnamed";
    unnamed.inputs = {TensorSpec{DType::kFloat32, {-1}}, TensorSpec{DType::kFloat32, {-1}}};
    models_ = {triple, unnamed};
  }

  // Sends `header` with one data frame per entry of `frames` (their bytes as given).
  Status Run(const std::string& header, const std::vector<std::string>& data,
             PendingRequest* request) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(std::string("client"));
    frames.emplace_back(header);
    for (const std::string& bytes : data) frames.emplace_back(bytes);
    size_t start = 0;
    EXPECT_TRUE(SplitEnvelope(frames, request, &start));
    size_t index = 0;
    return ParseJob(frames, start, models_, TimePoint{}, request, &index);
  }

  std::vector<ModelConfig> models_;
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape) {
  return R"({"name":")" + name + R"(","dtype":")" + dtype + R"(","shape":)" + shape + "}";
}

std::string Header(const std::string& model, const std::vector<std::string>& entries) {
  std::string list;
  for (const auto& e : entries) list += (list.empty() ? "" : ",") + e;
  return R"({"v":1,"id":1,"model":")" + model + R"(","inputs":[)" + list + "]}";
}

const std::string kX(8, 'x');      // float32 [1, 2]
const std::string kIds(8, 'i');    // int64 [1]
const std::string kBytes(3, 'b');  // uint8 [1, 3]

TEST_F(NamedInputsTest, InputsInAnyOrderArriveInTheModelsOrder) {
  const std::string x = Entry("x", "float32", "[1,2]"), ids = Entry("ids", "int64", "[1]"),
                    third = Entry("INPUT__2", "uint8", "[1,3]");
  PendingRequest r;
  Status s = Run(Header("triple", {third, x, ids}), {kBytes, kX, kIds}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0], (TensorSpec{DType::kFloat32, {1, 2}}));
  EXPECT_EQ(r.inputs[1], (TensorSpec{DType::kInt64, {1}}));
  EXPECT_EQ(r.inputs[2], (TensorSpec{DType::kUInt8, {1, 3}}));
  ASSERT_EQ(r.frames.size(), 3u);
  EXPECT_EQ(r.frames[0].to_string(), kX);
  EXPECT_EQ(r.frames[1].to_string(), kIds);
  EXPECT_EQ(r.frames[2].to_string(), kBytes);
  EXPECT_TRUE(r.batchable);
  EXPECT_EQ(r.rows, 1);

  // Every permutation gives the same request.
  std::vector<int> order = {0, 1, 2};
  const std::vector<std::string> entries = {x, ids, third}, bytes = {kX, kIds, kBytes};
  do {
    PendingRequest p;
    ASSERT_TRUE(Run(Header("triple", {entries[order[0]], entries[order[1]], entries[order[2]]}),
                    {bytes[order[0]], bytes[order[1]], bytes[order[2]]}, &p)
                    .ok());
    EXPECT_EQ(p.inputs, r.inputs);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(p.frames[i].to_string(), bytes[i]);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_F(NamedInputsTest, AModelWithoutNamesTakesTheDefaults) {
  PendingRequest r;
  Status s = Run(
      Header("unnamed", {Entry("INPUT__1", "float32", "[1]"), Entry("INPUT__0", "float32", "[1]")}),
      {"BBBB", "AAAA"}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.frames[0].to_string(), "AAAA");
  EXPECT_EQ(r.frames[1].to_string(), "BBBB");
}

TEST_F(NamedInputsTest, UnknownRepeatedAndMissingNamesListTheModelsInputs) {
  PendingRequest r;
  Status s = Run(Header("triple", {Entry("x", "float32", "[1,2]"), Entry("idz", "int64", "[1]"),
                                   Entry("INPUT__2", "uint8", "[1,3]")}),
                 {kX, kIds, kBytes}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "inputs[1].name: no input is named \"idz\" (model 'triple' takes x, ids, "
            "INPUT__2)");
  r = PendingRequest{};
  s = Run(Header("triple", {Entry("x", "float32", "[1,2]"), Entry("ids", "int64", "[1]"),
                            Entry("x", "float32", "[1,2]")}),
          {kX, kIds, kX}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "inputs[2].name: input \"x\" is given twice, also as inputs[0] (model "
            "'triple' takes x, ids, INPUT__2)");
  r = PendingRequest{};
  s = Run(Header("triple", {Entry("ids", "int64", "[1]"), Entry("x", "float32", "[1,2]")}),
          {kIds, kX}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "inputs: input \"INPUT__2\" is missing (model 'triple' takes x, ids, "
            "INPUT__2)");
  // The request id survives for the error reply.
  EXPECT_EQ(r.id, 1);
}

TEST_F(NamedInputsTest, SpecMismatchesNameTheInput) {
  PendingRequest r;
  Status s = Run(Header("triple", {Entry("ids", "int32", "[1]"), Entry("x", "float32", "[1,2]"),
                                   Entry("INPUT__2", "uint8", "[1,3]")}),
                 {std::string(4, 'i'), kX, kBytes}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("input \"ids\": "));
  EXPECT_THAT(s.message(), HasSubstr("int64"));
  EXPECT_THAT(s.message(), HasSubstr("int32"));
}

TEST_F(NamedInputsTest, FrameChecksStillSpeakOfTheRequestsOwnOrder) {
  PendingRequest r;
  // The second entry's frame is short: the error names inputs[1] as the client sent it.
  Status s = Run(Header("triple", {Entry("x", "float32", "[1,2]"), Entry("ids", "int64", "[1]"),
                                   Entry("INPUT__2", "uint8", "[1,3]")}),
                 {kX, std::string(7, 'i'), kBytes}, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("inputs[1]: int64 [1] needs 8 bytes, frame 2 has 7"));
}

}  // namespace
}  // namespace torchfarm
