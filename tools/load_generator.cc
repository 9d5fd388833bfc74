#include "tools/load_generator.h"

#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <zmq.hpp>

namespace torchfarm {

namespace {

constexpr Millis kExpiryScanInterval{50};
constexpr Millis kMaxDrain{10'000};
// Ids are unique across threads: the thread's number above bit 40, a counter below.
constexpr int kThreadIdShift = 40;

int64_t Nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

long MillisUntil(TimePoint when, TimePoint now) {
  if (when <= now) return 0;
  return static_cast<long>(std::chrono::ceil<Millis>(when - now).count());
}

double MeanOr(int64_t sum, int64_t count) { return count ? static_cast<double>(sum) / count : -1; }

}  // namespace

LatencySummary Summarize(std::vector<int64_t>* nanos) {
  LatencySummary s;
  if (nanos->empty()) return s;
  std::sort(nanos->begin(), nanos->end());
  const size_t n = nanos->size();
  auto at = [&](double q) {
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    return (*nanos)[std::clamp<size_t>(rank, 1, n) - 1] / 1e3;
  };
  double sum = 0;
  for (int64_t v : *nanos) sum += static_cast<double>(v);
  s.count = static_cast<int64_t>(n);
  s.min_us = nanos->front() / 1e3;
  s.max_us = nanos->back() / 1e3;
  s.mean_us = sum / static_cast<double>(n) / 1e3;
  s.p50_us = at(0.50);
  s.p90_us = at(0.90);
  s.p99_us = at(0.99);
  s.p999_us = at(0.999);
  return s;
}

struct LoadGenerator::ThreadState {
  struct Pending {
    TimePoint start;
    size_t client;
    int area;  // shm: the area of the client's region it uses; -1 without shm
  };
  int index = 0;
  std::vector<std::unique_ptr<zmq::socket_t>> clients;
  std::vector<size_t> global_client;         // per client: its number among all the generator's
  std::vector<std::vector<int>> free_areas;  // shm, per client: areas no request in flight uses
  std::vector<zmq::message_t> frames;        // the request being sent (reused)
  std::vector<zmq::pollitem_t> items;  // one per client, then the open loop's timerfd
  std::unordered_map<uint64_t, Pending> outstanding;
  std::vector<size_t> idle_clients;  // closed loop: clients whose last send failed
  uint64_t next_id = 0;
  std::mt19937_64 rng;
  int timer_fd = -1;
  // Results inside the window.
  std::vector<int64_t> latencies_ns;
  std::vector<int64_t> send_lag_ns;
  std::map<std::string, int64_t> errors;
  int64_t sent = 0, ok = 0, reply_bytes = 0;
  int64_t queue_sum = 0, compute_sum = 0, total_sum = 0, timed = 0;
};

LoadGenerator::LoadGenerator(LoadSpec spec)
    : spec_(std::move(spec)),
      pool_(spec_.inputs, spec_.seed),
      template_(spec_.model, spec_.inputs),
      wall_minus_steady_us_(
          std::chrono::duration_cast<std::chrono::microseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count() -
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
              .count()) {}

LoadGenerator::~LoadGenerator() {
  stop_early_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  for (auto& state : states_) {
    if (state->timer_fd >= 0) ::close(state->timer_fd);
    state->clients.clear();
  }
}

Status LoadGenerator::Start() {
  if (spec_.concurrency < 1 || spec_.depth < 1 || spec_.threads < 1) {
    return InvalidArgument("concurrency, depth and threads must be >= 1");
  }
  if (spec_.shm && spec_.rate > 0) {
    return InvalidArgument(
        "--shm works in the closed loop only: each client reuses the --depth "
        "areas of its region, and an open loop bounds no requests in flight; "
        "drop --rate");
  }
  const int threads = std::min(spec_.threads, spec_.concurrency);
  context_ = std::make_unique<zmq::context_t>(spec_.io_threads);
  for (int t = 0; t < threads; ++t) {
    auto state = std::make_unique<ThreadState>();
    state->index = t;
    state->next_id = (static_cast<uint64_t>(t) + 1) << kThreadIdShift;
    state->rng.seed(spec_.seed * 1000003 + static_cast<uint64_t>(t));
    states_.push_back(std::move(state));
  }
  try {
    for (int c = 0; c < spec_.concurrency; ++c) {
      ThreadState& state = *states_[static_cast<size_t>(c % threads)];
      auto socket = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
      socket->set(zmq::sockopt::linger, 0);
      socket->set(zmq::sockopt::sndhwm, 100'000);
      socket->set(zmq::sockopt::rcvhwm, 100'000);
      socket->set(zmq::sockopt::sndtimeo, spec_.io_timeout_ms);
      socket->connect(spec_.endpoint);
      state.items.push_back({static_cast<void*>(*socket), 0, ZMQ_POLLIN, 0});
      state.clients.push_back(std::move(socket));
      state.global_client.push_back(static_cast<size_t>(c));
    }
  } catch (const zmq::error_t& e) {
    return InvalidArgument("cannot connect to '" + spec_.endpoint + "': " + e.what());
  }
  if (spec_.shm) {
    if (Status s = CreateShmRegions(); !s.ok()) return s;
  }
  if (spec_.rate > 0) {
    for (auto& state : states_) {
      state->timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      if (state->timer_fd < 0) return Internal("timerfd_create failed");
      state->items.push_back({nullptr, state->timer_fd, ZMQ_POLLIN, 0});
    }
  }
  start_ = Clock::now();
  measure_begin_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(spec_.warmup_s));
  measure_end_ = measure_begin_ + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(spec_.seconds));
  for (auto& state : states_) threads_.emplace_back([this, s = state.get()] { RunThread(s); });
  return Status::Ok();
}

Status LoadGenerator::CreateShmRegions() {
  shm_ = std::make_unique<BenchShmRegions>(spec_.endpoint, spec_.model, spec_.inputs, spec_.depth,
                                           spec_.shm_output_bytes, spec_.io_timeout_ms);
  if (Status s = shm_->Create(spec_.concurrency); !s.ok()) return s;
  std::vector<int> areas;  // taken from the back: area 0 first
  for (int area = shm_->areas() - 1; area >= 0; --area) areas.push_back(area);
  for (auto& state : states_) state->free_areas.assign(state->clients.size(), areas);
  return Status::Ok();
}

void LoadGenerator::WaitMeasureEnd() {
  while (!stop_early_.load(std::memory_order_relaxed)) {
    TimePoint now = Clock::now();
    if (now >= measure_end_) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(measure_end_ - now, Millis(5)));
  }
}

StepResult LoadGenerator::Finish() {
  for (auto& t : threads_) t.join();
  threads_.clear();
  StepResult result;
  std::vector<int64_t> latencies, lags;
  int64_t queue = 0, compute = 0, total = 0, timed = 0, bytes = 0;
  for (auto& state : states_) {
    result.sent += state->sent;
    result.ok += state->ok;
    for (const auto& [code, n] : state->errors) {
      result.errors[code] += n;
      result.error_count += n;
    }
    latencies.insert(latencies.end(), state->latencies_ns.begin(), state->latencies_ns.end());
    lags.insert(lags.end(), state->send_lag_ns.begin(), state->send_lag_ns.end());
    queue += state->queue_sum;
    compute += state->compute_sum;
    total += state->total_sum;
    timed += state->timed;
    bytes += state->reply_bytes;
  }
  TimePoint end = measure_end_;
  if (int64_t stopped = stopped_at_ns_.load(); stopped > 0)
    end = TimePoint(Clock::duration(stopped));
  result.window_s =
      std::chrono::duration<double>(std::min(end, measure_end_) - measure_begin_).count();
  if (result.window_s > 0) {
    result.requests_per_s = static_cast<double>(result.ok + result.error_count) / result.window_s;
    result.ok_per_s = static_cast<double>(result.ok) / result.window_s;
    result.reply_bytes_per_s = static_cast<double>(bytes) / result.window_s;
  }
  if (spec_.slo_ms > 0) {
    const int64_t slo_ns = static_cast<int64_t>(spec_.slo_ms * 1e6);
    result.within_slo = std::count_if(latencies.begin(), latencies.end(),
                                      [slo_ns](int64_t ns) { return ns <= slo_ns; });
    result.within_slo_per_s =
        result.window_s > 0 ? static_cast<double>(result.within_slo) / result.window_s : 0;
  }
  result.latency = Summarize(&latencies);
  result.latencies_ns = std::move(latencies);
  result.send_lag = Summarize(&lags);
  result.server_queue_us = MeanOr(queue, timed);
  result.server_compute_us = MeanOr(compute, timed);
  result.server_total_us = MeanOr(total, timed);
  if (shm_) {
    result.shm_region_bytes = shm_->region_bytes();
    result.shm_release = shm_->Release();
  }
  return result;
}

StepResult MergeStepResults(const std::vector<StepResult>& parts, double slo_ms) {
  StepResult merged;
  double queue = 0, compute = 0, total = 0, timed = 0, bytes_per_s = 0;
  for (const StepResult& part : parts) {
    merged.sent += part.sent;
    merged.ok += part.ok;
    for (const auto& [code, n] : part.errors) merged.errors[code] += n;
    merged.error_count += part.error_count;
    merged.window_s = std::max(merged.window_s, part.window_s);
    merged.latencies_ns.insert(merged.latencies_ns.end(), part.latencies_ns.begin(),
                               part.latencies_ns.end());
    if (slo_ms > 0) merged.within_slo = std::max<int64_t>(merged.within_slo, 0) + part.within_slo;
    bytes_per_s += part.reply_bytes_per_s;
    if (part.send_lag.p99_us >= merged.send_lag.p99_us) merged.send_lag = part.send_lag;
    if (part.server_total_us >= 0) {
      const double weight = static_cast<double>(part.ok);
      queue += part.server_queue_us * weight;
      compute += part.server_compute_us * weight;
      total += part.server_total_us * weight;
      timed += weight;
    }
  }
  if (merged.window_s > 0) {
    merged.requests_per_s = static_cast<double>(merged.ok + merged.error_count) / merged.window_s;
    merged.ok_per_s = static_cast<double>(merged.ok) / merged.window_s;
    if (slo_ms > 0)
      merged.within_slo_per_s = static_cast<double>(merged.within_slo) / merged.window_s;
  } else if (slo_ms > 0) {
    merged.within_slo_per_s = 0;
  }
  merged.reply_bytes_per_s = bytes_per_s;
  if (timed > 0) {
    merged.server_queue_us = queue / timed;
    merged.server_compute_us = compute / timed;
    merged.server_total_us = total / timed;
  }
  merged.latency = Summarize(&merged.latencies_ns);
  return merged;
}

bool LoadGenerator::InWindow(TimePoint now) const {
  return now >= measure_begin_ && now < measure_end_ &&
         !stop_early_.load(std::memory_order_relaxed);
}

void LoadGenerator::RunThread(ThreadState* state) {
  ::prctl(PR_SET_TIMERSLACK, 1UL);  // open-loop wake-ups at the scheduled microsecond
  state->latencies_ns.reserve(1 << 16);
  if (spec_.rate > 0) {
    RunOpenLoop(state);
  } else {
    RunClosedLoop(state);
  }
  Drain(state);
}

bool LoadGenerator::BuildRequest(ThreadState* state, size_t client, uint64_t id, TimePoint start,
                                 int* area) {
  state->frames.clear();
  const RequestTemplate* header = &template_;
  if (shm_) {
    std::vector<int>& free = state->free_areas[client];
    if (free.empty()) return false;
    *area = free.back();
    free.pop_back();
    const size_t global = state->global_client[client];
    for (size_t i = 0; i < pool_.input_count(); ++i) {
      pool_.Fill(i, id, state->rng, shm_->InputAt(global, *area, i));
    }
    header = &shm_->Template(global, *area);
  }
  RequestExtras extras;
  extras.timeout_ms = spec_.timeout_ms;
  if (spec_.client_deadline && spec_.slo_ms > 0) {
    const int64_t start_us =
        std::chrono::duration_cast<std::chrono::microseconds>(start.time_since_epoch()).count();
    extras.deadline_unix_us =
        start_us + wall_minus_steady_us_ + static_cast<int64_t>(spec_.slo_ms * 1000);
  }
  char buffer[1024];
  size_t length = header->BuildInto(id, buffer, sizeof(buffer), extras);
  state->frames.push_back(length ? zmq::message_t(buffer, length)
                                 : zmq::message_t(header->Build(id, extras)));
  for (size_t i = 0; !shm_ && i < pool_.input_count(); ++i) {
    zmq::message_t data(pool_.input_bytes(i));
    pool_.Fill(i, id, state->rng, static_cast<uint8_t*>(data.data()));
    state->frames.push_back(std::move(data));
  }
  return true;
}

void LoadGenerator::SendRequest(ThreadState* state, size_t client,
                                std::optional<TimePoint> scheduled) {
  const uint64_t id = ++state->next_id;
  const TimePoint start = scheduled.value_or(Clock::now());
  int area = -1;
  if (!BuildRequest(state, client, id, start, &area)) {
    // Cannot happen in the closed loop (a client never has more than --depth in flight).
    if (InWindow(Clock::now())) ++state->errors["SHM_AREAS_BUSY"];
    return;
  }
  zmq::socket_t& socket = *state->clients[client];
  bool sent = true;
  try {
    for (size_t i = 0; sent && i < state->frames.size(); ++i) {
      const bool last = i + 1 == state->frames.size();
      sent = socket.send(state->frames[i], last ? zmq::send_flags::none : zmq::send_flags::sndmore)
                 .has_value();
    }
  } catch (const zmq::error_t&) {
    sent = false;
  }
  if (!sent) {
    if (area >= 0) state->free_areas[client].push_back(area);
    if (InWindow(Clock::now())) ++state->errors["SEND_FAILED"];
    state->idle_clients.push_back(client);  // the closed loop retries it at the next scan
    return;
  }
  ++state->sent;
  state->outstanding.emplace(id, ThreadState::Pending{start, client, area});
}

void LoadGenerator::Record(ThreadState* state, TimePoint now, TimePoint start,
                           const ScannedReply& reply, int64_t data_bytes) {
  if (!InWindow(now)) return;
  if (reply.ok) {
    ++state->ok;
    state->latencies_ns.push_back(Nanos(now - start));
    state->reply_bytes += data_bytes;
    if (reply.total_us >= 0) {
      state->queue_sum += std::max<int64_t>(reply.queue_us, 0);
      state->compute_sum += std::max<int64_t>(reply.compute_us, 0);
      state->total_sum += reply.total_us;
      ++state->timed;
    }
  } else {
    ++state->errors[reply.code];
  }
  if (spec_.max_requests > 0 && counted_.fetch_add(1) + 1 >= spec_.max_requests) {
    stopped_at_ns_.store(now.time_since_epoch().count());
    stop_early_.store(true);
  }
}

void LoadGenerator::HandleReplies(ThreadState* state, size_t client, bool resend) {
  zmq::socket_t& socket = *state->clients[client];
  for (;;) {
    zmq::message_t header;
    if (!socket.recv(header, zmq::recv_flags::dontwait)) return;
    int64_t data_bytes = 0;
    for (bool more = header.more(); more;) {
      zmq::message_t part;
      if (!socket.recv(part, zmq::recv_flags::none)) break;
      data_bytes += static_cast<int64_t>(part.size());
      more = part.more();
    }
    const TimePoint now = Clock::now();
    ScannedReply reply = ScanReply(header.to_string_view());
    auto it = state->outstanding.find(reply.id);
    if (it == state->outstanding.end()) {
      // Late (already counted as NO_REPLY), or without a readable id: then it is an error.
      if (reply.id == 0) {
        reply.ok = false;
        if (reply.code.empty()) reply.code = "MALFORMED_REPLY";
        Record(state, now, now, reply, 0);
      }
      continue;
    }
    const ThreadState::Pending pending = it->second;
    state->outstanding.erase(it);
    if (pending.area >= 0) {
      uint64_t output_bytes = 0;
      if (reply.ok && (data_bytes != 0 ||
                       !shm_->OutputsInArea(header.to_string_view(), state->global_client[client],
                                            pending.area, &output_bytes))) {
        reply.ok = false;
        reply.code = "SHM_OUTPUT_OUT_OF_RANGE";
      }
      data_bytes = static_cast<int64_t>(output_bytes);
      state->free_areas[client].push_back(pending.area);
    }
    Record(state, now, pending.start, reply, data_bytes);
    if (resend && now < measure_end_ && !stop_early_.load(std::memory_order_relaxed)) {
      SendRequest(state, client, std::nullopt);
    }
  }
}

std::vector<size_t> LoadGenerator::ExpireOutstanding(ThreadState* state, TimePoint now) {
  std::vector<size_t> clients;
  const TimePoint limit = now - Millis(spec_.io_timeout_ms);
  for (auto it = state->outstanding.begin(); it != state->outstanding.end();) {
    if (it->second.start > limit) {
      ++it;
      continue;
    }
    if (InWindow(now)) ++state->errors["NO_REPLY"];
    clients.push_back(it->second.client);
    // A late reply may still write this area's outputs; the benchmark accepts that rather than
    // stall the client (the area's next request checks only where its reply puts them).
    if (it->second.area >= 0) state->free_areas[it->second.client].push_back(it->second.area);
    it = state->outstanding.erase(it);
  }
  return clients;
}

void LoadGenerator::RunClosedLoop(ThreadState* state) {
  for (size_t c = 0; c < state->clients.size(); ++c) {
    for (int d = 0; d < spec_.depth; ++d) SendRequest(state, c, std::nullopt);
  }
  TimePoint next_scan = Clock::now() + kExpiryScanInterval;
  for (;;) {
    TimePoint now = Clock::now();
    if (now >= measure_end_ || stop_early_.load(std::memory_order_relaxed)) return;
    long wait = MillisUntil(std::min(measure_end_, next_scan), now);
    if (zmq_poll(state->items.data(), static_cast<int>(state->items.size()), wait) < 0) continue;
    for (size_t c = 0; c < state->clients.size(); ++c) {
      if (state->items[c].revents & ZMQ_POLLIN) HandleReplies(state, c, /*resend=*/true);
    }
    now = Clock::now();
    if (now >= next_scan) {
      std::vector<size_t> retry = ExpireOutstanding(state, now);
      retry.insert(retry.end(), state->idle_clients.begin(), state->idle_clients.end());
      state->idle_clients.clear();
      for (size_t c : retry) SendRequest(state, c, std::nullopt);
      next_scan = now + kExpiryScanInterval;
    }
  }
}

void LoadGenerator::RunOpenLoop(ThreadState* state) {
  const size_t threads = states_.size();
  const double mean_gap_ns = 1e9 * static_cast<double>(threads) / spec_.rate;
  ArrivalProcess arrivals(spec_.arrival, mean_gap_ns, spec_.cv, spec_.seed * 1000 + state->index);
  // Gaps are summed in double nanoseconds so a drawn stream keeps its mean over hours.
  double offset_ns = spec_.arrival == Arrival::kFixed
                         // Even schedules interleave so the merged stream is evenly spaced.
                         ? mean_gap_ns * static_cast<double>(state->index) / threads
                         : arrivals.NextGapNs();
  auto at = [this](double ns) {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::nanoseconds(static_cast<int64_t>(ns)));
  };
  TimePoint next_send = at(offset_ns);
  TimePoint next_scan = start_ + kExpiryScanInterval;
  size_t round_robin = 0;
  const size_t timer_item = state->clients.size();
  for (;;) {
    TimePoint now = Clock::now();
    if (now >= measure_end_ || stop_early_.load(std::memory_order_relaxed)) return;
    for (; next_send <= now; offset_ns += arrivals.NextGapNs(), next_send = at(offset_ns)) {
      if (InWindow(now)) state->send_lag_ns.push_back(Nanos(now - next_send));
      SendRequest(state, round_robin++ % state->clients.size(), next_send);
    }
    itimerspec when{};
    auto since_epoch = next_send.time_since_epoch();
    when.it_value.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    when.it_value.tv_nsec = Nanos(since_epoch) % 1'000'000'000;
    ::timerfd_settime(state->timer_fd, TFD_TIMER_ABSTIME, &when, nullptr);
    long wait = MillisUntil(std::min(measure_end_, next_scan), now);
    if (zmq_poll(state->items.data(), static_cast<int>(state->items.size()), wait) < 0) continue;
    if (state->items[timer_item].revents & ZMQ_POLLIN) {
      uint64_t expirations;
      [[maybe_unused]] ssize_t n = ::read(state->timer_fd, &expirations, sizeof(expirations));
    }
    for (size_t c = 0; c < state->clients.size(); ++c) {
      if (state->items[c].revents & ZMQ_POLLIN) HandleReplies(state, c, /*resend=*/false);
    }
    now = Clock::now();
    if (now >= next_scan) {
      ExpireOutstanding(state, now);
      next_scan = now + kExpiryScanInterval;
    }
  }
}

void LoadGenerator::Drain(ThreadState* state) {
  const TimePoint deadline =
      Clock::now() + std::min<Clock::duration>(Millis(spec_.io_timeout_ms), kMaxDrain);
  const size_t clients = state->clients.size();
  while (!state->outstanding.empty()) {
    TimePoint now = Clock::now();
    if (now >= deadline) return;
    if (zmq_poll(state->items.data(), static_cast<int>(clients),
                 std::min(MillisUntil(deadline, now), 50L)) < 0) {
      continue;
    }
    for (size_t c = 0; c < clients; ++c) {
      if (state->items[c].revents & ZMQ_POLLIN) HandleReplies(state, c, /*resend=*/false);
    }
  }
}

}  // namespace torchfarm
