// FakeFarmLoop (fake_farm_loop.h).
#include "fake_farm_loop.h"

#include <mutex>
#include <vector>

#include "common/model_versions.h"
#include "common/protocol.h"
#include "tests/frontend/hub_loop.h"
#include "typed_request_json.h"

namespace torchfarm::testing {

using nlohmann::json;

FakeFarmLoop::FakeFarmLoop() {
  thread_ = std::thread([this] { Run(); });
}

FakeFarmLoop::~FakeFarmLoop() {
  stop_ = true;
  thread_.join();
}

json FakeFarmLoop::last_header() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_header_;
}

void FakeFarmLoop::Run() {
  while (!stop_) {
    std::vector<zmq::message_t> frames;
    if (ReceiveFromHub(hub_, &frames, std::chrono::milliseconds(20))) Answer(frames);
  }
}

namespace {

json ModelMeta(const std::string& name) {
  return {{"name", name},
          {"versions", {"1"}},
          {"platform", "pytorch_libtorch"},
          {"ready", true},
          {"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {-1, 4}}}}},
          {"outputs", json::array()}};
}

}  // namespace

void FakeFarmLoop::Answer(std::vector<zmq::message_t>& frames) {
  // [identity][tag][call id][header][data...]; the reply carries the call id, as the loop's.
  std::string tag;
  json header;
  if (!ReadFrontendMessage(frames, &tag, &header)) return;
  const json call_id = std::stoull(frames[2].to_string());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_header_ = header;
    last_header_["tag"] = tag;
  }
  ++requests_;
  json reply = {{"v", 1}, {"id", call_id}};
  std::vector<zmq::message_t> data;
  const std::string model = header.value("model", "");
  if (tag != "meta" && model == "silent") return;  // never answered
  if (tag == "meta" && header.value("dashboard", false)) {
    // The dashboard's status (FarmStatus::Dashboard), with a name and a cause to escape.
    reply.update(
        {{"status", "ok"},
         {"time_ms", 1'700'000'000'000},
         {"supervisor",
          {{"pid", 4000},
           {"uptime_s", 3725.5},
           {"version", "0.1.0"},
           {"draining", false},
           {"ready", ready_.load()}}},
         {"totals",
          {{"requests", 24691},
           {"errors", 3},
           {"throughput_rps_1s", 1000.25},
           {"queue_depth", 3},
           {"workers", 2},
           {"ready_workers", 1},
           {"restarts", 1}}},
         {"models",
          {{{"name", "echo"},
            {"version", "1"},
            {"versions", {"1"}},
            {"state", "available"},
            {"ready_workers", 1},
            {"workers", 2},
            {"spares", 0},
            {"spares_ready", 0},
            {"queue_depth", 3},
            {"requests", 24691},
            {"errors", 2},
            {"rejected", 1},
            {"errors_by_code", {{"UNAVAILABLE", 2}, {"RESOURCE_EXHAUSTED", 1}}},
            {"mean_batch_size", 3.5},
            {"throughput_rps_1s", 1000.25},
            {"latency_us",
             {{"total", {{"p50", 1200}, {"p99", 3400}, {"count", 9}}},
              {"queue", {{"p50", 40}, {"p99", 900}, {"count", 9}}},
              {"compute", {{"p50", 800}, {"p99", 2500}, {"count", 9}}}}},
            {"rollout",
             {{"id", 1}, {"state", "rolling"}, {"replaced", 1}, {"total", 2}, {"reason", ""}}}}}},
         {"workers",
          {{{"id", 0},
            {"model", "echo"},
            {"version", "1"},
            {"pid", 4001},
            {"device", "cpu"},
            {"fallback", false},
            {"state", "ready"},
            {"role", "serving"},
            {"uptime_s", 3725.0},
            {"restarts", 0},
            {"last_exit", ""},
            {"failure_reason", ""},
            {"requests", 12345},
            {"mean_batch_size", 3.09},
            {"inflight", 1},
            {"rss_bytes", 129394278},
            {"cpu_percent", 45.0}},
           {{"id", 1},
            {"model", "echo"},
            {"version", "1"},
            {"pid", -1},
            {"device", "cpu"},
            {"fallback", false},
            {"state", "restarting"},
            {"role", "serving"},
            {"uptime_s", 0},
            {"restarts", 1},
            {"last_exit", "worker hung: <b>no heartbeat</b> (killed by SIGKILL)"},
            {"failure_reason", ""},
            {"requests", 12346},
            {"mean_batch_size", 3.09},
            {"inflight", 0},
            {"rss_bytes", nullptr},
            {"cpu_percent", nullptr}}}},
         {"events",
          {{{"seq", 2},
            {"time_ms", 1'700'000'000'000},
            {"kind", "exit"},
            {"model", "echo"},
            {"worker", 1},
            {"text", "worker 1 pid 4002 exited: killed by SIGKILL"}},
           {{"seq", 1},
            {"time_ms", 1'699'999'999'000},
            {"kind", "reload"},
            {"text", "reloaded: no changes"}}}},
         {"last_event", 2}});
  } else if (tag == "meta") {
    if (!model.empty() && model != "echo" && model != "named") {
      reply.update({{"status", "error"},
                    {"code", "NOT_FOUND"},
                    {"message", ModelNotServed(model, {"echo", "named"}).message()}});
    } else {
      reply.update({{"status", "ok"}, {"live", true}, {"ready", ready_.load()},
                    {"draining", false}, {"models", {ModelMeta("echo"), ModelMeta("named")}}});
    }
  } else if (header.value("version", "1") != "1") {
    // Like the farm (common/model_versions.h): a version it does not serve is NOT_FOUND.
    reply.update(
        {{"status", "error"},
         {"code", "NOT_FOUND"},
         {"message", VersionNotLoaded(model, header.value("version", ""), {"1"}).message()}});
  } else if (model.rfind("code-", 0) == 0) {
    reply.update({{"status", "error"}, {"code", model.substr(5)}, {"message", "fake " + model}});
  } else if (model == "echo" || model == "named") {
    json outputs = json::array();
    const json& inputs = header["inputs"];
    for (size_t k = 0; k < inputs.size(); ++k) {
      const size_t from = model == "echo" ? k : inputs.size() - 1 - k;
      json output = {{"dtype", inputs[from]["dtype"]}, {"shape", inputs[from]["shape"]}};
      if (model == "named") output["name"] = "out_" + inputs[from]["name"].get<std::string>();
      outputs.push_back(output);
      data.emplace_back(frames[4 + from].data(), frames[4 + from].size());
    }
    reply.update({{"status", "ok"}, {"outputs", outputs},
                  {"timing_us", {{"queue", 1}, {"compute", 2}, {"total", 3}}}, {"worker", 0}});
  } else {
    reply.update({{"status", "error"},
                  {"code", "NOT_FOUND"},
                  {"message", ModelNotServed(model, {"echo", "named"}).message()}});
  }
  std::vector<zmq::message_t> message;
  message.push_back(std::move(frames[0]));
  message.emplace_back(reply.dump());
  for (auto& frame : data) message.push_back(std::move(frame));
  ReplyThroughHub(hub_, std::move(message));
}

}  // namespace torchfarm::testing
