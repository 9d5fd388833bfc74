// The admin command table (supervisor/admin_service.h): dispatch and argument checks.
#include "supervisor/admin_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

AdminService Service() {
  AdminService service;
  service.Register("health", {}, [](const json&) { return json{{"live", true}}; });
  service.Register("scale", {{"model", true}, {"count", false}}, [](const json& r) {
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
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("{\"cmd\": \"scale\", \"model\": NAME, \"count\": N}"));
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("got \"stats\""));
  reply = service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", -1}});
  EXPECT_EQ(reply["error"], "scale: expected a non-negative integer \"count\", got -1");
  reply = service.Run({{"cmd", "scale"}, {"count", 2}});
  EXPECT_EQ(reply["error"], "scale: expected a string \"model\", got none");
  reply = service.Run({{"cmd", "scale"}, {"model", "mlp"}, {"count", 1e12}});
  EXPECT_EQ(reply["ok"], false) << "a count beyond int is refused, not truncated";
  reply = service.Run({{"cmd", "nope"}});
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("unknown command 'nope'"));
}

}  // namespace
}  // namespace torchfarm
