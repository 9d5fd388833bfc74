#include "soak_client.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>

#include "farm_fixture.h"

namespace torchfarm::testing {

using nlohmann::json;

MlpReference::MlpReference() {
  torch::jit::Module module = torch::jit::load(ModelDir() + "/mlp.pt");
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::manual_seed(15);
  inputs_ = torch::randn({kRows, kInputColumns});
  std::vector<at::Tensor> rows;
  for (int r = 0; r < kRows; ++r) {
    rows.push_back(module.forward({inputs_.narrow(0, r, 1).clone()}).toTensor());
  }
  outputs_ = torch::cat(rows).contiguous();
}

bool MlpReference::Matches(int row, const float* output) const {
  const float* expected = outputs_.data_ptr<float>() + row * kOutputColumns;
  for (int64_t c = 0; c < kOutputColumns; ++c) {
    if (!(std::fabs(output[c] - expected[c]) <= 1e-5f + 1e-4f * std::fabs(expected[c]))) {
      return false;
    }
  }
  return true;
}

SoakClient::SoakClient(int index, std::string endpoint, const RoundConfig& config,
                       const MlpReference& mlp, RoundControl& control, RoundLedger& ledger)
    : index_(index),
      endpoint_(std::move(endpoint)),
      config_(config),
      mlp_(mlp),
      control_(control),
      ledger_(ledger),
      rng_(config.seed + static_cast<uint64_t>(index) + 1),
      next_id_(static_cast<uint64_t>(index + 1) * 1'000'000'000) {}

void SoakClient::Run() {
  Client client(endpoint_, 5'000);
  if (!client.connect_status().ok()) {
    ledger_.Fail("client " + std::to_string(index_) + ": " + client.connect_status().ToString());
    return;
  }
  while (!control_.stop_sending) {
    for (int n = burst_.exchange(0); n > 0; --n) SendOne(client);
    while (pending_.size() < static_cast<size_t>(config_.pipeline_depth)) SendOne(client);
    ReceiveFor(client, 20);
  }
  auto past_deadline = [&] {
    return Clock::now().time_since_epoch().count() > control_.drain_deadline_ns.load();
  };
  while (!pending_.empty() && !past_deadline()) ReceiveFor(client, 50);
  if (!pending_.empty()) {
    std::ostringstream lost;
    lost << "client " << index_ << ": " << pending_.size()
         << " requests never answered (lost), e.g.";
    int shown = 0;
    for (const auto& [id, request] : pending_) {
      if (shown++ == 3) break;
      lost << " [" << Describe(id, request) << "]";
    }
    ledger_.Fail(lost.str());
  }
  // Anything arriving now is a second reply.
  auto linger_end = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < linger_end) ReceiveFor(client, 50);
}

void SoakClient::SendOne(Client& client) {
  Pending request;
  const bool mlp = config_.models.size() > 1 && Chance(rng_, config_.mlp_percent);
  request.model = mlp ? "mlp" : "identity";
  request.rows = Uniform(rng_, 1, 4);
  request.priority = Uniform(rng_, 0, 2);  // above priority_levels - 1 it is clamped
  if (Chance(rng_, config_.deadline_percent)) request.timeout_ms = Uniform(rng_, 50, 500);
  const int64_t columns = mlp ? MlpReference::kInputColumns : config_.models[0].columns;
  std::string data(static_cast<size_t>(request.rows * columns) * sizeof(float), '\0');
  if (mlp) {
    for (int64_t r = 0; r < request.rows; ++r) {
      request.pool_rows.push_back(Uniform(rng_, 0, MlpReference::kRows - 1));
      std::memcpy(&data[r * columns * sizeof(float)], mlp_.input(request.pool_rows.back()),
                  columns * sizeof(float));
    }
  } else {
    request.input.resize(request.rows * columns);
    std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
    for (float& v : request.input) v = value(rng_);
    std::memcpy(data.data(), request.input.data(), data.size());
  }
  const uint64_t id = next_id_++;
  json header = {{"v", kProtocolVersion},
                 {"id", id},
                 {"model", request.model},
                 {"inputs", json::array({{{"dtype", "float32"}, {"shape", {request.rows, columns}}}})},
                 {"timeout_ms", request.timeout_ms},
                 {"priority", request.priority}};
  request.sent = Clock::now();
  Status s = client.SendRaw({header.dump(), std::move(data)});
  if (!s.ok()) {
    ledger_.Fail("client " + std::to_string(index_) + ": cannot send: " + s.ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return;
  }
  ++ledger_.sent;
  pending_.emplace(id, std::move(request));
}

void SoakClient::ReceiveFor(Client& client, int timeout_ms) {
  std::vector<std::string> frames;
  for (int wait = timeout_ms;; wait = 0) {
    Status s = client.ReceiveRaw(&frames, wait);
    if (s.code() == StatusCode::kDeadlineExceeded) return;  // nothing (more) arrived
    if (!s.ok()) {
      ledger_.Fail("client " + std::to_string(index_) + ": cannot receive: " + s.ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    HandleReply(frames);
  }
}

void SoakClient::HandleReply(const std::vector<std::string>& frames) {
  ReplyHeader reply;
  Status parsed = ParseReplyHeader(frames.at(0), &reply);
  if (!reply.id.is_number_unsigned()) {
    ledger_.Fail("reply without a request id: " + frames[0].substr(0, 300));
    return;
  }
  const uint64_t id = reply.id.get<uint64_t>();
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    ledger_.Fail((answered_.count(id) ? "second reply to request " : "reply to a request never sent, id ") +
                 std::to_string(id) + ": " + frames[0].substr(0, 300));
    return;
  }
  Pending request = std::move(it->second);
  pending_.erase(it);
  answered_.insert(id);
  if (!parsed.ok()) {
    ledger_.Fail("malformed reply to [" + Describe(id, request) + "]: " + parsed.ToString() + ": " +
                 frames[0].substr(0, 300));
  } else if (reply.status.ok()) {
    ++ledger_.ok;
    CheckOutputs(id, request, reply, frames);
  } else {
    CheckError(id, request, reply);
  }
}

void SoakClient::CheckOutputs(uint64_t id, const Pending& request, const ReplyHeader& reply,
                              const std::vector<std::string>& frames) {
  const bool mlp = request.model == "mlp";
  const int64_t columns = mlp ? MlpReference::kOutputColumns : config_.models[0].columns;
  const TensorSpec expected{DType::kFloat32, {request.rows, columns}};
  if (reply.outputs.size() != 1 || frames.size() != 2 || !(reply.outputs[0] == expected) ||
      frames[1].size() != static_cast<size_t>(request.rows * columns) * sizeof(float)) {
    ledger_.Fail("ok reply to [" + Describe(id, request) + "] has " +
                 std::to_string(frames.size() - 1) + " data frames and header " +
                 reply.raw.dump().substr(0, 300) + "; expected one float32 " +
                 ShapeToString(expected.shape));
    return;
  }
  const float* output = reinterpret_cast<const float*>(frames[1].data());
  for (int64_t r = 0; r < request.rows; ++r) {
    const bool equal =
        mlp ? mlp_.Matches(request.pool_rows[r], output + r * columns)
            : std::memcmp(output + r * columns, request.input.data() + r * columns,
                          columns * sizeof(float)) == 0;
    if (!equal) {
      ledger_.Fail("wrong output in row " + std::to_string(r) + " of the ok reply to [" +
                   Describe(id, request) + "] from worker " + std::to_string(reply.worker_id));
      return;
    }
  }
}

void SoakClient::CheckError(uint64_t id, const Pending& request, const ReplyHeader& reply) {
  const std::string code = reply.raw.value("code", "");
  const std::string message = reply.raw.value("message", "");
  if (code == "DEADLINE_EXCEEDED") {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - request.sent).count();
    if (request.timeout_ms == 0) {
      ledger_.Fail("DEADLINE_EXCEEDED for [" + Describe(id, request) +
                   "], which has no deadline: " + message);
    } else if (waited + 1 < request.timeout_ms) {
      ledger_.Fail("DEADLINE_EXCEEDED for [" + Describe(id, request) + "] after only " +
                   std::to_string(waited) + " ms: " + message);
    } else {
      ++ledger_.deadline_exceeded;
    }
    return;
  }
  if (code == "UNAVAILABLE" || code == "INTERNAL" || code == "RESOURCE_EXHAUSTED") {
    ledger_.CountError(code, message);
    return;
  }
  ledger_.Fail("error reply to [" + Describe(id, request) + "] with code '" + code +
               "', which no fault explains: " + message);
}

std::string SoakClient::Describe(uint64_t id, const Pending& request) const {
  const int64_t age =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - request.sent).count();
  return "id " + std::to_string(id) + " " + request.model + " rows " +
         std::to_string(request.rows) + " priority " + std::to_string(request.priority) +
         " timeout_ms " + std::to_string(request.timeout_ms) + ", sent " + std::to_string(age) +
         " ms ago";
}

}  // namespace torchfarm::testing
