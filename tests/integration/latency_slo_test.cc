// The latency objective (issue 32, latency_slo_ms) against the real binaries: the slow model on
// one worker, batch 1, driven open loop at 2.5x what it can serve. Without an SLO the queue grows
// and nearly every answer comes too late; with one, what cannot make it is refused at once
// (DEADLINE_EXCEEDED naming the estimate), most accepted requests are answered within it, and the
// goodput (OK answers within the SLO per second) is far higher. And two clients at 1:10 rates,
// together 2.5x capacity: the light one's requests go before the heavy one's backlog (fair
// queueing, the default), so it gets at least its fair share of the answers within the SLO and
// the refusals are the heavy one's. Rates and the SLO are set from the batch cost measured on this
// machine first, so the test asks the same of a fast and a slow machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;

constexpr int kMatmuls = 30;  // 128x128 matmuls per batch of the slow model: a few ms

json SlowModel(int64_t slo_ms) {
  json m = {{"name", "slow"},
            {"path", ModelDir() + "/slow.pt"},
            {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 4}}}})},
            {"instances", json::array({{{"count", 1}}})},
            {"max_batch_size", 1}};
  if (slo_ms > 0) m["latency_slo_ms"] = slo_ms;
  return m;
}

void Send(zmq::socket_t& socket, uint64_t id) {
  const float row[4] = {static_cast<float>(kMatmuls), 0, 0, 0};
  json header = {{"v", 1},
                 {"id", id},
                 {"model", "slow"},
                 {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, 4}}}})}};
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(row, sizeof(row)), zmq::send_flags::none);
}

// One reply: its id, status and (for an error) message; false after `timeout_ms` without one.
bool Receive(zmq::socket_t& socket, int timeout_ms, json* header) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) != 1) return false;
  zmq::message_t head, more;
  if (!socket.recv(head)) return false;
  while (head.more() && socket.recv(more) && more.more()) {
  }
  *header = json::parse(head.to_string_view());
  return true;
}

// Median ms of one request on the idle farm (after the model's first runs).
double IdleBatchMs(const std::string& endpoint) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(endpoint);
  std::vector<double> ms;
  for (int k = 0; k < 25; ++k) {
    const auto start = Clock::now();
    Send(socket, 1'000'000 + k);
    json header;
    if (!Receive(socket, 30'000, &header)) return -1;
    if (k >= 5) ms.push_back(Ms(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct OpenLoopResult {
  int sent = 0, ok = 0, within = 0, deadline = 0, other = 0, unanswered = 0;
  std::map<std::string, int> codes;
  std::string first_refusal, first_other;
};

// `rate` requests/s for `seconds`, evenly spaced, any number in flight; each answer's latency
// counts from its scheduled send.
OpenLoopResult OpenLoop(const std::string& endpoint, double rate, double seconds, double slo_ms) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  socket.connect(endpoint);
  OpenLoopResult r;
  std::map<uint64_t, Clock::time_point> scheduled;
  const auto start = Clock::now();
  const auto gap =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1 / rate));
  auto take = [&](const json& header) {
    const uint64_t id = header["id"].get<uint64_t>();
    auto it = scheduled.find(id);
    if (it == scheduled.end()) return;
    const double ms = Ms(Clock::now() - it->second).count();
    scheduled.erase(it);
    const std::string code = header.value("status", "") == "ok" ? "OK" : header.value("code", "");
    ++r.codes[code];
    if (code == "OK") {
      ++r.ok;
      r.within += ms <= slo_ms;
    } else if (code == "DEADLINE_EXCEEDED") {
      ++r.deadline;
      if (r.first_refusal.empty()) r.first_refusal = header.value("message", header.dump());
    } else {
      ++r.other;
      if (r.first_other.empty()) r.first_other = header.dump();
    }
  };
  for (auto next = start; next - start < std::chrono::duration<double>(seconds); next += gap) {
    json header;
    while (Clock::now() < next) {
      const int wait = static_cast<int>(std::max(0.0, Ms(next - Clock::now()).count()));
      if (Receive(socket, wait, &header)) take(header);
    }
    scheduled[static_cast<uint64_t>(r.sent)] = next;
    Send(socket, static_cast<uint64_t>(r.sent++));
  }
  json header;
  const auto drain_end = Clock::now() + std::chrono::seconds(30);
  while (!scheduled.empty() && Clock::now() < drain_end) {
    if (Receive(socket, 500, &header)) take(header);
  }
  r.unanswered = static_cast<int>(scheduled.size());
  return r;
}

TEST(LatencySlo, UnderOverloadAcceptedRequestsMeetTheSloAndGoodputFarExceedsNoSlo) {
  double batch_ms = 0;
  {
    Farm probe(json::array({SlowModel(0)}));
    ASSERT_TRUE(probe.Start());
    ASSERT_TRUE(probe.WaitReady()) << probe.error();
    batch_ms = IdleBatchMs(probe.endpoint());
    EXPECT_EQ(probe.Stop(), 0);
  }
  ASSERT_GT(batch_ms, 0) << "no answer on the idle farm";
  const double capacity = 1000 / batch_ms;  // requests/s of one worker at batch 1
  const double rate = 2.5 * capacity;
  const int64_t slo_ms = std::max<int64_t>(20, static_cast<int64_t>(10 * batch_ms));
  std::printf(
      "slow model: %.2f ms a request idle, capacity ~%.0f/s; open loop at %.0f/s, SLO %lld ms\n",
      batch_ms, capacity, rate, static_cast<long long>(slo_ms));

  OpenLoopResult without, with;
  json slo_stats;
  for (const bool slo : {false, true}) {
    Farm farm(json::array({SlowModel(slo ? slo_ms : 0)}));
    ASSERT_TRUE(farm.Start());
    ASSERT_TRUE(farm.WaitReady()) << farm.error();
    (void)IdleBatchMs(farm.endpoint());  // warm-up, and the cost model's first batches
    (slo ? with : without) = OpenLoop(farm.endpoint(), rate, 3.0, static_cast<double>(slo_ms));
    if (slo) slo_stats = farm.Admin("stats")["models"][0]["slo"];
    EXPECT_EQ(farm.Stop(), 0);
  }
  const OpenLoopResult* runs[] = {&without, &with};
  for (const OpenLoopResult* r : runs) {
    std::printf(
        "%s: sent %d, ok %d (within the SLO %d), DEADLINE_EXCEEDED %d, other %d, "
        "unanswered %d; goodput %.0f/s\n",
        r == &with ? "latency_slo_ms" : "no SLO", r->sent, r->ok, r->within, r->deadline, r->other,
        r->unanswered, r->within / 3.0);
    EXPECT_EQ(r->unanswered, 0) << "every request answered";
    for (const auto& [code, n] : r->codes) std::printf("  %s: %d\n", code.c_str(), n);
  }
  // One client sending 2.5x what the worker serves also meets limits.max_queued_per_client (256
  // queued: RESOURCE_EXHAUSTED) without an SLO; with one, the queue never grows that far.
  EXPECT_EQ(with.other, 0) << with.first_other;
  EXPECT_EQ(without.deadline, 0) << "without an SLO nothing is refused for time";
  ASSERT_GT(with.ok, 0);
  EXPECT_GT(with.deadline, with.sent / 4) << "2.5x overload: over half cannot be served in time";
  EXPECT_NE(with.first_refusal.find("would finish at ~"), std::string::npos) << with.first_refusal;
  EXPECT_GE(with.within, 2 * std::max(1, without.within))
      << "goodput with the SLO far above the queue that grows without one";
  std::printf("farm's own count (arrival to reply, warm-up included): %s\n",
              slo_stats.dump().c_str());
  EXPECT_GT(slo_stats["refused"].get<int64_t>(), 0) << slo_stats.dump();
  // Most accepted requests make it by the farm's own clock. How many exactly depends on how
  // steady the machine is (the cost is measured, not known): a figure for the benchmark
  // (docs/benchmarks.md, "Latency objective"), here only a floor far above the 1% without an SLO.
  const double within = slo_stats["within"].get<double>();
  EXPECT_GE(within / std::max(1.0, within + slo_stats["missed"].get<double>()), 0.5)
      << slo_stats.dump();
}

struct Tenant {
  const char* name;
  double rate;
  uint64_t first_id;
  OpenLoopResult result;
  std::map<uint64_t, Clock::time_point> scheduled;
};

// Each tenant on its own connection (the farm's client key is the connection's routing id),
// evenly spaced sends at its rate for `seconds`, one thread; each answer's latency counts from
// its scheduled send.
void OpenLoopTenants(const std::string& endpoint, std::vector<Tenant>* tenants, double seconds,
                     double slo_ms) {
  zmq::context_t context(1);
  std::vector<zmq::socket_t> sockets;
  std::vector<zmq::pollitem_t> items;
  for (size_t i = 0; i < tenants->size(); ++i) {
    sockets.emplace_back(context, zmq::socket_type::dealer);
    sockets.back().set(zmq::sockopt::linger, 0);
    sockets.back().set(zmq::sockopt::sndhwm, 0);
    sockets.back().set(zmq::sockopt::rcvhwm, 0);
    sockets.back().connect(endpoint);
  }
  for (auto& socket : sockets) items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
  auto take = [&](Tenant& t, const json& header) {
    auto it = t.scheduled.find(header["id"].get<uint64_t>());
    if (it == t.scheduled.end()) return;
    const double ms = Ms(Clock::now() - it->second).count();
    t.scheduled.erase(it);
    const std::string code = header.value("status", "") == "ok" ? "OK" : header.value("code", "");
    ++t.result.codes[code];
    if (code == "OK") {
      ++t.result.ok;
      t.result.within += ms <= slo_ms;
    } else if (code == "DEADLINE_EXCEEDED") {
      ++t.result.deadline;
    } else {
      ++t.result.other;
      if (t.result.first_other.empty()) t.result.first_other = header.dump();
    }
  };
  auto poll = [&](int wait_ms) {
    if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait_ms)) <= 0) return;
    for (size_t i = 0; i < sockets.size(); ++i) {
      json header;
      while ((items[i].revents & ZMQ_POLLIN) && Receive(sockets[i], 0, &header)) {
        take((*tenants)[i], header);
      }
    }
  };
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<Clock::time_point> next(tenants->size(), start);
  for (;;) {
    const size_t due =
        static_cast<size_t>(std::min_element(next.begin(), next.end()) - next.begin());
    if (next[due] >= end) break;
    while (Clock::now() < next[due]) {
      poll(static_cast<int>(std::max(0.0, Ms(next[due] - Clock::now()).count())));
    }
    Tenant& t = (*tenants)[due];
    const uint64_t id = t.first_id + static_cast<uint64_t>(t.result.sent++);
    t.scheduled[id] = next[due];
    Send(sockets[due], id);
    next[due] +=
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1 / t.rate));
  }
  const auto drain_end = Clock::now() + std::chrono::seconds(30);
  auto waiting = [&] {
    for (const Tenant& t : *tenants) {
      if (!t.scheduled.empty()) return true;
    }
    return false;
  };
  while (waiting() && Clock::now() < drain_end) poll(500);
  for (Tenant& t : *tenants) t.result.unanswered = static_cast<int>(t.scheduled.size());
}

TEST(LatencySlo, TwoClientsAtOneToTenTheLightOneGetsItsFairShareWithinTheSlo) {
  double batch_ms = 0;
  {
    Farm probe(json::array({SlowModel(0)}));
    ASSERT_TRUE(probe.Start());
    ASSERT_TRUE(probe.WaitReady()) << probe.error();
    batch_ms = IdleBatchMs(probe.endpoint());
    EXPECT_EQ(probe.Stop(), 0);
  }
  ASSERT_GT(batch_ms, 0) << "no answer on the idle farm";
  const double capacity = 1000 / batch_ms;
  const int64_t slo_ms = std::max<int64_t>(20, static_cast<int64_t>(10 * batch_ms));
  // Together 2.5x capacity at 1:10: the light one asks for ~23% of capacity, under its half.
  std::vector<Tenant> tenants = {{"light", 2.5 * capacity / 11, 0, {}, {}},
                                 {"heavy", 25 * capacity / 11, 1'000'000'000, {}, {}}};
  std::printf(
      "slow model: %.2f ms a request idle, capacity ~%.0f/s; light %.0f/s, heavy %.0f/s, "
      "SLO %lld ms\n",
      batch_ms, capacity, tenants[0].rate, tenants[1].rate, static_cast<long long>(slo_ms));
  Farm farm(json::array({SlowModel(slo_ms)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  (void)IdleBatchMs(farm.endpoint());  // warm-up, and the cost model's first batches
  OpenLoopTenants(farm.endpoint(), &tenants, 3.0, static_cast<double>(slo_ms));
  EXPECT_EQ(farm.Stop(), 0);
  const OpenLoopResult& light = tenants[0].result;
  const OpenLoopResult& heavy = tenants[1].result;
  for (const Tenant& t : tenants) {
    std::printf(
        "%s: sent %d, ok %d (within the SLO %d), DEADLINE_EXCEEDED %d, other %d, "
        "unanswered %d\n",
        t.name, t.result.sent, t.result.ok, t.result.within, t.result.deadline, t.result.other,
        t.result.unanswered);
    EXPECT_EQ(t.result.unanswered, 0) << t.name << ": every request answered";
    EXPECT_EQ(t.result.other, 0) << t.name << ": " << t.result.first_other;
  }
  ASSERT_GT(light.sent, 0);
  EXPECT_GT(heavy.deadline, heavy.sent / 4) << "2.5x overload: much of the heavy load is refused";
  // Max-min fairness: the light client asks for less than half, so its fair share of the answers
  // within the SLO is all it sent, capped at half of them all. 20% slack for a noisy machine.
  const int total_within = light.within + heavy.within;
  const double fair_share = std::min<double>(light.sent, total_within / 2.0);
  EXPECT_GE(light.within, 0.8 * fair_share)
      << "the light client got " << light.within << " answers within the SLO of " << total_within
      << "; its fair share is " << fair_share;
  EXPECT_LE(light.deadline, light.sent / 5)
      << "the light client's requests are not the ones refused or shed";
}

}  // namespace
}  // namespace torchfarm::testing
