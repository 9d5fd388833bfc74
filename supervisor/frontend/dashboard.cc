// The dashboard's routes and its server-side page (dashboard.h). The page's tables here and in
// dashboard.js show the same columns; the script replaces them on its first refresh.
#include "supervisor/frontend/dashboard.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <utility>
#include <vector>

#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/frontend/v2_http_codec.h"

namespace torchfarm {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

double Number(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string Text(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string Integer(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  return std::to_string(it->get<int64_t>());
}

std::string Rate(double value) { return Printf("%.1f", value); }

// A stage's "p50 / p99" ("40us / 900us"); "-" before one.
std::string Quantiles(const json& model, const char* stage);

// The latency of a stage ("total", "queue", ...) at `quantile` ("p50", "p99"); "-" before one.
std::string Latency(const json& model, const char* stage, const char* quantile) {
  auto latency = model.find("latency_us");
  if (latency == model.end() || !latency->is_object()) return "-";
  auto s = latency->find(stage);
  if (s == latency->end() || !s->is_object() || Number(*s, "count") <= 0) return "-";
  return FormatMicros(s->value(quantile, json()));
}

std::string Quantiles(const json& model, const char* stage) {
  const std::string p50 = Latency(model, stage, "p50");
  return p50 == "-" ? p50 : p50 + " / " + Latency(model, stage, "p99");
}

// "UNAVAILABLE 3, RESOURCE_EXHAUSTED 1"; "" when none.
std::string ErrorsByCode(const json& model) {
  std::string out;
  auto codes = model.find("errors_by_code");
  if (codes == model.end() || !codes->is_object()) return out;
  for (const auto& [code, n] : codes->items()) {
    out += (out.empty() ? "" : ", ") + code + " " + n.dump();
  }
  return out;
}

std::string Rollout(const json& model) {
  auto r = model.find("rollout");
  if (r == model.end() || !r->is_object()) return "-";
  std::string out = Text(*r, "state") + " " + Integer(*r, "replaced") + "/" + Integer(*r, "total");
  if (const std::string reason = Text(*r, "reason"); !reason.empty()) out += ": " + reason;
  return out;
}

std::string Stages(const json& model) {
  auto latency = model.find("latency_us");
  if (latency == model.end() || !latency->is_object()) return "-";
  std::string out;
  for (const char* stage : {"decode", "preprocess", "postprocess"}) {
    auto s = latency->find(stage);
    if (s == latency->end() || Number(*s, "count") <= 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(stage) + " " + Quantiles(model, stage);
  }
  return out.empty() ? "-" : out;
}

std::string WallTime(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char buffer[16];
  std::strftime(buffer, sizeof(buffer), "%H:%M:%S", &local);
  return buffer;
}

// One table cell; `key` names the value for the script and the tests (data-k).
void Cell(std::string* out, const char* key, const std::string& text, const char* cls = nullptr) {
  *out += "<td data-k=\"";
  *out += key;
  *out += '"';
  if (cls) {
    *out += " class=\"";
    *out += cls;
    *out += '"';
  }
  *out += '>' + HtmlEscape(text) + "</td>";
}

// Column heads; text columns (names, states, causes) are aligned left, numbers right.
void Head(std::string* out, std::initializer_list<const char*> columns) {
  static const std::set<std::string> kText = {"model",  "state",          "device", "last exit",
                                              "errors", "stages p50/p99", "rollout"};
  *out += "<thead><tr>";
  for (const char* c : columns) {
    *out += kText.count(c) ? "<th class=\"l\">" : "<th>";
    *out += std::string(c) + "</th>";
  }
  *out += "</tr></thead>";
}

std::string StateClass(const std::string& state) {
  std::string cls = "state state-";
  for (char c : state) cls += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  return cls;
}

void Summary(std::string* out, const json& status) {
  const json& sv = status.value("supervisor", json::object());
  const json& t = status.value("totals", json::object());
  auto item = [&](const char* key, const std::string& label, const std::string& value) {
    *out += "<span class=\"kv\" data-k=\"" + std::string(key) + "\"><b>" + HtmlEscape(label) +
            "</b> " + HtmlEscape(value) + "</span> ";
  };
  const bool draining = sv.value("draining", false);
  item("ready", "ready", draining ? "draining" : sv.value("ready", false) ? "yes" : "no");
  item("rps", "req/s", Rate(Number(t, "throughput_rps_1s")));
  item("requests", "requests", Integer(t, "requests"));
  item("errors", "errors", Integer(t, "errors"));
  item("queue", "queued", Integer(t, "queue_depth"));
  item("workers", "workers", Integer(t, "ready_workers") + "/" + Integer(t, "workers") + " ready");
  item("restarts", "restarts", Integer(t, "restarts"));
  item("pid", "pid", Integer(sv, "pid"));
  item("uptime", "up", FormatUptime(Number(sv, "uptime_s")));
  item("version", "v", Text(sv, "version"));
  item("rss", "supervisor RSS", FormatBytes(sv.value("rss_bytes", json())));
}

void Models(std::string* out, const json& status) {
  *out += "<table id=\"models\">";
  Head(out, {"model", "state", "workers", "spares", "queue", "req/s", "requests", "errors", "p50",
             "p99", "queue p50/p99", "compute p50/p99", "stages p50/p99", "batch", "rollout"});
  *out += "<tbody>";
  for (const json& m : status.value("models", json::array())) {
    const std::string name = Text(m, "name");
    std::string versions;
    for (const json& v : m.value("versions", json::array())) {
      versions += (versions.empty() ? "" : ",") + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    *out += "<tr data-model=\"" + HtmlEscape(name) + "\" data-version=\"" +
            HtmlEscape(Text(m, "version")) + "\">";
    // One row per served version; the others loaded beside it are named.
    Cell(out, "name",
         name + " v" + Text(m, "version") +
             (versions.find(',') != std::string::npos ? " (of " + versions + ")" : ""));
    const std::string state = Text(m, "state");
    Cell(out, "state", state, StateClass(state).c_str());
    Cell(out, "workers", Integer(m, "ready_workers") + "/" + Integer(m, "workers"));
    Cell(out, "spares", Integer(m, "spares_ready") + "/" + Integer(m, "spares"));
    Cell(out, "queue", Integer(m, "queue_depth"));
    Cell(out, "rps", Rate(Number(m, "throughput_rps_1s")));
    Cell(out, "requests", Integer(m, "requests"));
    const std::string codes = ErrorsByCode(m);
    const int64_t errors = static_cast<int64_t>(Number(m, "errors") + Number(m, "rejected"));
    Cell(out, "errors", std::to_string(errors) + (codes.empty() ? "" : " (" + codes + ")"));
    Cell(out, "p50", Latency(m, "total", "p50"));
    Cell(out, "p99", Latency(m, "total", "p99"));
    Cell(out, "queue_latency", Quantiles(m, "queue"));
    Cell(out, "compute_latency", Quantiles(m, "compute"));
    Cell(out, "stages", Stages(m));
    Cell(out, "batch", Printf("%.2f", Number(m, "mean_batch_size")));
    Cell(out, "rollout", Rollout(m));
    *out += "</tr>";
  }
  *out += "</tbody></table>";
}

void Workers(std::string* out, const json& status) {
  *out += "<table id=\"workers\">";
  Head(out, {"id", "model", "state", "pid", "device", "restarts", "last exit", "uptime", "RSS",
             "CPU%", "requests", "batch", "in flight"});
  *out += "<tbody>";
  for (const json& w : status.value("workers", json::array())) {
    const std::string id = Integer(w, "id");
    *out += "<tr data-worker=\"" + id + "\">";
    Cell(out, "id", id);
    Cell(out, "model", Text(w, "model") + " v" + Text(w, "version"));
    std::string state = Text(w, "state");
    if (Text(w, "role") == "spare") state += " (spare)";
    Cell(out, "state", state, StateClass(Text(w, "state")).c_str());
    Cell(out, "pid", Number(w, "pid") > 0 ? Integer(w, "pid") : "-");
    Cell(out, "device", Text(w, "device") + (w.value("fallback", false) ? " (fallback)" : ""));
    Cell(out, "restarts", Integer(w, "restarts"));
    // A failed worker's reason says more than its last exit (a start that never got to one).
    std::string last_exit = Text(w, "last_exit");
    if (const std::string why = Text(w, "failure_reason");
        !why.empty() && Text(w, "state") == "failed") {
      last_exit += (last_exit.empty() ? "" : "; ") + why;
    }
    Cell(out, "last_exit", last_exit.empty() ? "-" : last_exit, "cause");
    Cell(out, "uptime", FormatUptime(Number(w, "uptime_s")));
    Cell(out, "rss", FormatBytes(w.value("rss_bytes", json())));
    const json cpu = w.value("cpu_percent", json());
    Cell(out, "cpu", cpu.is_number() ? Printf("%.1f", cpu.get<double>()) : "-");
    Cell(out, "requests", Integer(w, "requests"));
    Cell(out, "batch", Printf("%.2f", Number(w, "mean_batch_size")));
    Cell(out, "inflight", Integer(w, "inflight"));
    *out += "</tr>";
  }
  *out += "</tbody></table>";
}

void Events(std::string* out, const json& status) {
  *out += "<ol id=\"events\">";
  const json events = status.value("events", json::array());
  if (events.empty()) *out += "<li class=\"empty\">no events yet</li>";
  for (const json& e : events) {
    const std::string kind = Text(e, "kind");
    *out += "<li data-seq=\"" + Integer(e, "seq") + "\" class=\"event event-" + HtmlEscape(kind) +
            "\"><time>" + WallTime(static_cast<int64_t>(Number(e, "time_ms"))) + "</time> <b>" +
            HtmlEscape(kind) + "</b> ";
    if (const std::string model = Text(e, "model"); !model.empty()) {
      *out += "<i>" + HtmlEscape(model) + "</i> ";
    }
    *out += "<span>" + HtmlEscape(Text(e, "text")) + "</span></li>";
  }
  *out += "</ol>";
}

V2HttpAnswer Page(int http_status, std::string body, const char* content_type,
                  const char* cache = "no-store") {
  V2HttpAnswer answer;
  answer.http_status = http_status;
  answer.body = std::move(body);
  answer.content_type = content_type;
  answer.code = http_status == 200 ? StatusCode::kOk : StatusCode::kUnavailable;
  answer.headers = {{"Content-Security-Policy", std::string(kDashboardCsp)},
                    {"X-Content-Type-Options", "nosniff"},
                    {"Referrer-Policy", "no-referrer"},
                    {"Cache-Control", cache}};
  return answer;
}

int64_t DashboardFarmMicros(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatMicros(const json& micros) {
  if (!micros.is_number()) return "-";
  const double us = micros.get<double>();
  if (us < 0) return "-";
  if (us < 1000) return Printf("%.0fus", us);
  const double ms = us / 1000;
  if (ms < 10) return Printf("%.2fms", ms);
  if (ms < 1000) return Printf("%.1fms", ms);
  return Printf("%.2fs", ms / 1000);
}

std::string FormatBytes(const json& bytes) {
  if (!bytes.is_number()) return "-";
  double b = bytes.get<double>();
  if (b < 1024) return Printf("%.0fB", b);
  const char* units[] = {"K", "M", "G", "T"};
  int unit = -1;
  while (b >= 1024 && unit < 3) {
    b /= 1024;
    ++unit;
  }
  return Printf(b < 10 ? "%.2f" : "%.1f", b) + units[unit];
}

std::string FormatUptime(double seconds) {
  if (!(seconds > 0)) return "-";
  const int64_t s = static_cast<int64_t>(seconds);
  char buffer[32];
  if (s < 60) {
    std::snprintf(buffer, sizeof(buffer), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return buffer;
}

bool IsDashboardTarget(std::string_view target) {
  const std::string_view path = PathOf(target);
  // `base` followed by '/' and then anything; nothing built (every HTTP request asks this).
  const auto under = [path](std::string_view base) {
    return path.size() > base.size() && path.compare(0, base.size(), base) == 0 &&
           path[base.size()] == '/';
  };
  if (path == kDashboardStatusPath) return true;
  if (under(kDashboardStatusPath) && path.size() == kDashboardStatusPath.size() + 1) return true;
  return path == kDashboardPath || under(kDashboardPath);
}

uint64_t DashboardEventsAfter(std::string_view target) {
  const size_t query = target.find('?');
  if (query == std::string_view::npos) return 0;
  std::string_view rest = target.substr(query + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    constexpr std::string_view kKey = "events_after=";
    if (pair.substr(0, kKey.size()) == kKey) {
      const std::string_view digits = pair.substr(kKey.size());
      if (digits.empty() || digits.size() > 19) return 0;
      uint64_t n = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') return 0;
        n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      return n;
    }
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return 0;
}

std::string RenderDashboardPage(const json& status) {
  std::string out;
  out.reserve(16 << 10);
  out +=
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>torchfarm</title><link rel=\"icon\" href=\"data:,\">"
      "<link rel=\"stylesheet\" href=\"/dashboard/dashboard.css\"></head>\n<body>\n"
      "<header><h1>torchfarm</h1><p id=\"summary\">";
  Summary(&out, status);
  out += "</p><p id=\"live\" class=\"static\">snapshot at " +
         WallTime(static_cast<int64_t>(Number(status, "time_ms"))) +
         " (this page refreshes itself with JavaScript on; without it, reload)</p></header>\n"
         "<main>\n<section><h2>Models</h2><div class=\"scroll\">";
  Models(&out, status);
  out +=
      "</div></section>\n<section id=\"charts\" hidden><h2>Last 15 minutes</h2>"
      "<div class=\"charts\"></div></section>\n<section><h2>Workers</h2><div class=\"scroll\">";
  Workers(&out, status);
  out += "</div></section>\n<section><h2>Events</h2>";
  Events(&out, status);
  out += "</section>\n</main>\n<script src=\"/dashboard/dashboard.js\"></script>\n</body></html>\n";
  return out;
}

void HandleDashboardRequest(const HttpRequest& request, bool enabled, FarmChannel& channel,
                            std::function<void(V2HttpAnswer)> done) {
  const auto raw = request.target();
  const std::string_view target(raw.data(), raw.size());
  std::string path(PathOf(target));
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  if (!enabled) {
    V2HttpAnswer answer = V2ErrorAnswer(
        NotFound("the dashboard is off on this farm (config frontend.dashboard is false)"));
    return done(std::move(answer));
  }
  const bool status_json = path == kDashboardStatusPath;
  const bool page = path == kDashboardPath;
  const bool script = path == std::string(kDashboardPath) + "/dashboard.js";
  const bool style = path == std::string(kDashboardPath) + "/dashboard.css";
  if (!status_json && !page && !script && !style) {
    return done(
        V2ErrorAnswer(NotFound("no such path: '" + path.substr(0, 200) +
                               "'; the dashboard serves /dashboard, /dashboard/dashboard.js, "
                               "/dashboard/dashboard.css and /v2/torchfarm/stats")));
  }
  if (request.method() != http::verb::get) {
    V2HttpAnswer answer = V2ErrorAnswer(InvalidArgument(
        "this path takes GET, got " + std::string(http::to_string(request.method()))));
    answer.http_status = 405;
    answer.allow = "GET";
    return done(std::move(answer));
  }
  // Fixed assets: a revalidation costs a request, never a stale script after an upgrade.
  if (script) {
    return done(
        Page(200, std::string(DashboardScript()), "text/javascript; charset=utf-8", "no-cache"));
  }
  if (style) {
    return done(Page(200, std::string(DashboardStyle()), "text/css; charset=utf-8", "no-cache"));
  }
  json query = {{"dashboard", true}};
  if (status_json) {
    if (const uint64_t after = DashboardEventsAfter(target); after > 0) {
      query["events_after"] = after;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  channel.Call(kMetaTag, std::move(query), {},
               [status_json, start, done = std::move(done)](FarmReply reply) {
                 json status = std::move(reply.header.raw);
                 const bool ok = status.is_object() && status.value("status", "") == "ok" &&
                                 status.contains("models");
                 V2HttpAnswer answer;
                 if (!ok) {
                   const Status why = reply.status.ok()
                                          ? Unavailable("the supervisor sent no dashboard status")
                                          : reply.status;
                   if (status_json) {
                     answer = V2ErrorAnswer(why);
                   } else {
                     answer = Page(HttpStatusOf(why.code()),
                                   "<!DOCTYPE html><title>torchfarm</title><p>" +
                                       HtmlEscape(why.message()) + "</p>\n",
                                   "text/html; charset=utf-8");
                     answer.code = why.code();
                   }
                 } else {
                   for (const char* key : {"id", "status", "v"}) status.erase(key);
                   answer =
                       status_json
                           ? Page(200, status.dump(-1, ' ', false, json::error_handler_t::replace),
                                  "application/json")
                           : Page(200, RenderDashboardPage(status), "text/html; charset=utf-8");
                 }
                 answer.farm_us = DashboardFarmMicros(start);
                 done(std::move(answer));
               });
}

}  // namespace torchfarm
