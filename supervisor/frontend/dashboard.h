// The live dashboard on http_endpoint (issue 33; docs/operations.md "Dashboard").
//
//   GET /dashboard                  one page: the farm's status rendered here as plain tables
//                                   (what curl, a text browser or a browser without JavaScript
//                                   shows), then dashboard.js takes over: it polls the status
//                                   about once a second, redraws the tables and events and keeps
//                                   15 minutes of charts in the page
//   GET /dashboard/dashboard.js     the page's script and style sheet, built into the binary
//   GET /dashboard/dashboard.css    (dashboard/*: no CDN, no font, nothing from outside)
//   GET /v2/torchfarm/stats[?events_after=N]
//                                   the status JSON (FarmStatus::Dashboard: what `stats` has, less
//                                   paths, keys and config), with the events after sequence N
//
// Every answer carries a Content-Security-Policy that lets the page load and connect to its own
// origin only. Config frontend.dashboard false: these paths answer 404. The access rules are the
// endpoint's own (loopback unless TLS or "insecure": common/config.cc). Runs on the FarmChannel's
// thread; asks the loop with a kMetaTag query {"dashboard": true}.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/http_v2_handler.h"

namespace torchfarm {

inline constexpr std::string_view kDashboardPath = "/dashboard";
inline constexpr std::string_view kDashboardStatusPath = "/v2/torchfarm/stats";
// What the page may load: its own origin's script, style and status; images only as data: URLs
// (the empty favicon).
inline constexpr std::string_view kDashboardCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The script and style sheet (supervisor/frontend/dashboard/, embedded at build time).
std::string_view DashboardScript();
std::string_view DashboardStyle();

// True for the paths above (with or without a query string or a trailing slash).
bool IsDashboardTarget(std::string_view target);
// "events_after" of a status target's query string; 0 when absent or not a number.
uint64_t DashboardEventsAfter(std::string_view target);

// Answers a dashboard path; `enabled` is frontend.dashboard. `done` runs once, on the channel's
// thread.
void HandleDashboardRequest(const HttpRequest& request, bool enabled, FarmChannel& channel,
                            std::function<void(V2HttpAnswer)> done);

// The whole HTML page for `status` (FarmStatus::Dashboard's JSON): summary, models, workers and
// events as tables, every text escaped; the charts are the script's.
std::string RenderDashboardPage(const nlohmann::json& status);

// Helpers, shared with the tests (dashboard.js formats the same way).
std::string HtmlEscape(std::string_view text);
std::string FormatMicros(const nlohmann::json& micros);  // 850us, 1.20ms, 12.5ms, 2.10s, "-"
std::string FormatBytes(const nlohmann::json& bytes);    // 512B, 12.0K, 123.4M, 2.50G, "-"
std::string FormatUptime(double seconds);                // 45s, 3m07s, 1h02m, 2d03h

}  // namespace torchfarm
