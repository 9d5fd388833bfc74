// FakeFarmLoop (fake_farm_loop.h).
#include "fake_farm_loop.h"

#include <mutex>
#include <vector>

#include "common/model_versions.h"
#include "common/protocol.h"

namespace torchfarm::testing {

using nlohmann::json;

FakeFarmLoop::FakeFarmLoop(zmq::context_t& context, std::string endpoint)
    : endpoint_(std::move(endpoint)), socket_(context, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind(endpoint_);
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
    zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t part;
      if (!socket_.recv(part, zmq::recv_flags::none)) break;
      const bool more = part.more();
      frames.push_back(std::move(part));
      if (!more) break;
    }
    Answer(frames);
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
  if (frames.size() < 4) return;
  const std::string tag = frames[1].to_string();
  const json call_id = std::stoull(frames[2].to_string());
  json header = json::parse(frames[3].to_string(), nullptr, false);
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
  if (tag == "meta") {
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
  socket_.send(frames[0], zmq::send_flags::sndmore);
  const std::string text = reply.dump();
  socket_.send(zmq::buffer(text), data.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (size_t i = 0; i < data.size(); ++i) {
    socket_.send(data[i], i + 1 < data.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

}  // namespace torchfarm::testing
