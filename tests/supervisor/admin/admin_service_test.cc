// The admin command table (supervisor/admin/admin_service.h): dispatch and argument checks.
#include "supervisor/admin/admin_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "common/worker_count.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

AdminService Service() {
  AdminService service;
  service.Register("health", {}, [](const json&) { return json{{"live", true}}; });
  service.Register("scale", {{"model", true}, {"count", false, 0, kMaxWorkersPerModel}}, [](const json& r) {
    return json{{"ok", true}, {"model", r["model"]}, {"count", r["count"]}};
  });
  return service;
}

TEST(AdminServiceTest, RunsTheNamedCommandWithItsFields) {
  AdminService service = Service();
  EXPECT_EQ(service.Run({{"cmd", "health"}})["live"], true);
  json reply = service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", 3}});
  EXPECT_EQ(reply["model"], "mlp");
  EXPECT_EQ(reply["count"], 3);
}

TEST(AdminServiceTest, MalformedRequestsSayWhatWasExpectedAndWhatCame) {
  AdminService service = Service();
  json reply = service.Run(json("stats"));
  EXPECT_EQ(reply["ok"], false);
  EXPECT_THAT(reply["error"].get<std::string>(),
              HasSubstr("{\"cmd\": \"scale\", \"model\": NAME, \"count\": 0..1024}"));
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("got \"stats\""));
  reply = service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", -1}});
  EXPECT_EQ(reply["error"], "scale.count: expected an integer in 0..1024, got number -1");
  reply = service.Run({{"cmd", "scale"}, {"count", 2}});
  EXPECT_EQ(reply["error"], "scale.model: expected a string, got none");
  reply = service.Run({{"cmd", "scale"}, {"model", 7}, {"count", 2}});
  EXPECT_EQ(reply["error"], "scale.model: expected a string, got 7");
  reply = service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", 1e12}});
  EXPECT_EQ(reply["ok"], false) << "a count beyond int is refused, not truncated";
  reply = service.Run({{"cmd", "nope"}});
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("unknown command 'nope'"));
}

// Every integer field at and beyond its bounds, and at the widths where a value would wrap or be
// truncated on its way into an int: 2^31, 2^32, 2^63-1, 2^64-1, negative, fractional.
TEST(AdminServiceTest, IntegerFieldsAreCheckedAtAndBeyondTheirBounds) {
  AdminService service;
  service.Register("scale", {{"model", true}, {"count", false, 0, kMaxWorkersPerModel}},
                   [](const json& r) { return json{{"ok", true}, {"count", r["count"]}}; });
  service.Register("restart", {{"worker", false}},
                   [](const json& r) { return json{{"ok", true}, {"worker", r["worker"]}}; });
  auto scale = [&](const json& count) {
    return service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", count}});
  };
  auto restart = [&](const json& worker) { return service.Run({{"cmd", "restart"}, {"worker", worker}}); };
  EXPECT_EQ(scale(0)["count"], 0);
  EXPECT_EQ(scale(kMaxWorkersPerModel)["count"], kMaxWorkersPerModel);
  EXPECT_EQ(scale(kMaxWorkersPerModel + 1)["error"],
            "scale.count: expected an integer in 0..1024, got number 1025");
  EXPECT_EQ(restart(0)["worker"], 0);
  EXPECT_EQ(restart(INT32_MAX)["worker"], INT32_MAX);
  const json beyond[] = {json(-1),
                         json(int64_t{1} << 31),
                         json(int64_t{1} << 32),
                         json(INT64_MAX),
                         json(INT64_MIN),
                         json(UINT64_MAX),
                         json(uint64_t{1} << 63),
                         json(2.5),
                         json("3"),
                         json(true),
                         json(nullptr)};
  for (const json& value : beyond) {
    json reply = restart(value);
    EXPECT_EQ(reply["ok"], false) << value.dump();
    EXPECT_THAT(reply.value("error", ""), HasSubstr("restart.worker: expected an integer in 0..2147483647, got "))
        << value.dump();
    EXPECT_THAT(reply.value("error", ""), HasSubstr(value.dump())) << "the message repeats the value";
    reply = scale(value);
    EXPECT_EQ(reply["ok"], false) << value.dump();
    EXPECT_THAT(reply.value("error", ""), HasSubstr("scale.count: expected an integer in 0..1024"));
  }
}

}  // namespace
}  // namespace torchfarm
