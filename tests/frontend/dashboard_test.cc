// The dashboard's pure parts (supervisor/frontend/dashboard.h): which targets it owns, the
// events_after of a status request, the units it prints (dashboard.js prints the same), HTML
// escaping, and a page for a farm with nothing in it.
#include "supervisor/frontend/dashboard.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using nlohmann::json;

TEST(DashboardTest, OwnsItsPathsAndNoOther) {
  for (const char* target :
       {"/dashboard", "/dashboard/", "/dashboard?x=1", "/dashboard/dashboard.js",
        "/dashboard/anything", "/v2/torchfarm/stats", "/v2/torchfarm/stats?events_after=3",
        "/v2/torchfarm/stats/"}) {
    EXPECT_TRUE(IsDashboardTarget(target)) << target;
  }
  for (const char* target : {"/", "/dashboards", "/dashboardx/a", "/v2/torchfarm",
                             "/v2/torchfarm/statsx", "/v2/models/stats", "/v2/health/ready"}) {
    EXPECT_FALSE(IsDashboardTarget(target)) << target;
  }
}

TEST(DashboardTest, EventsAfterIsANumberOfTheQueryOrZero) {
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats"), 0u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?events_after=42"), 42u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?a=1&events_after=7&b=2"), 7u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?events_after="), 0u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?events_after=-1"), 0u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?events_after=12x"), 0u);
  EXPECT_EQ(DashboardEventsAfter("/v2/torchfarm/stats?events_after=99999999999999999999"), 0u)
      << "too long to be a sequence number";
}

TEST(DashboardTest, UnitsAreThoseOfTorchfarmTop) {
  EXPECT_EQ(FormatMicros(json(850)), "850us");
  EXPECT_EQ(FormatMicros(json(1200)), "1.20ms");
  EXPECT_EQ(FormatMicros(json(12500)), "12.5ms");
  EXPECT_EQ(FormatMicros(json(2'100'000)), "2.10s");
  EXPECT_EQ(FormatMicros(json()), "-");
  EXPECT_EQ(FormatBytes(json(512)), "512B");
  EXPECT_EQ(FormatBytes(json(129394278)), "123.4M");
  EXPECT_EQ(FormatBytes(json(uint64_t{2684354560})), "2.50G");
  EXPECT_EQ(FormatBytes(json(nullptr)), "-");
  EXPECT_EQ(FormatUptime(45.5), "45s");
  EXPECT_EQ(FormatUptime(187), "3m07s");
  EXPECT_EQ(FormatUptime(3725), "1h02m");
  EXPECT_EQ(FormatUptime(2 * 86400 + 3 * 3600 + 5), "2d03h");
  EXPECT_EQ(FormatUptime(0), "-");
}

TEST(DashboardTest, HtmlEscapeLeavesNoMarkup) {
  EXPECT_EQ(HtmlEscape("<script>alert('x' & \"y\")</script>"),
            "&lt;script&gt;alert(&#39;x&#39; &amp; &quot;y&quot;)&lt;/script&gt;");
}

TEST(DashboardTest, APageForAnEmptyFarmStillHasItsTablesAndScript) {
  const std::string page = RenderDashboardPage(json::object());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<table id=\"models\">"), std::string::npos);
  EXPECT_NE(page.find("<table id=\"workers\">"), std::string::npos);
  EXPECT_NE(page.find("no events yet"), std::string::npos);
  EXPECT_NE(page.find("<link rel=\"icon\" href=\"data:,\">"), std::string::npos)
      << "no favicon request";
  EXPECT_NE(page.find("name=\"viewport\""), std::string::npos) << "readable on a phone";
}

TEST(DashboardTest, TheAssetsAreBuiltIn) {
  EXPECT_NE(DashboardScript().find("'use strict'"), std::string_view::npos);
  EXPECT_NE(DashboardStyle().find("#events"), std::string_view::npos);
  EXPECT_EQ(DashboardScript().find("innerHTML"), std::string_view::npos)
      << "text is set with textContent only";
}

}  // namespace
}  // namespace torchfarm
