#include "tools/bench_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "common/integer_flag.h"
#include "tools/arrival_process.h"
#include "tools/echo_server.h"
#include "tools/load_generator.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr int kAdminTimeoutMs = 2000;
// Clients (and generator threads) of one step, and requests each keeps in flight.
constexpr int64_t kMaxBenchClients = 100'000;
constexpr int64_t kMaxBenchDepth = 100'000;
// Tenants of one --clients step: each is a generator thread of its own.
constexpr int64_t kMaxBenchTenants = 1'000;

int ReportError(const Status& status, int exit_code) {
  std::cerr << "error: " << status.ToString() << "\n";
  return exit_code;
}

json Round(double value, int decimals) {
  if (!std::isfinite(value)) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count},
          {"min", Round(s.min_us, 1)},
          {"mean", Round(s.mean_us, 1)},
          {"p50", Round(s.p50_us, 1)},
          {"p90", Round(s.p90_us, 1)},
          {"p99", Round(s.p99_us, 1)},
          {"p999", Round(s.p999_us, 1)},
          {"max", Round(s.max_us, 1)}};
}

json ServerMean(double value) { return value < 0 ? json(nullptr) : Round(value, 1); }

// A generator that cannot start: no answer, no way to send or a malformed reply is a transport
// failure; bad flags or a region this host cannot map a usage error; any other refusal of the
// farm (e.g. RESOURCE_EXHAUSTED past its client_shm limits) a server error.
int StartFailureExit(const Status& status) {
  switch (status.code()) {
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
    case StatusCode::kInternal:
      return kExitTransport;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitServerError;
  }
}

// The admin socket's {"cmd": "stats"}; null on timeout or a non-object reply.
json AdminStats(const std::string& endpoint) {
  try {
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::req);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, kAdminTimeoutMs);
    socket.set(zmq::sockopt::sndtimeo, kAdminTimeoutMs);
    socket.connect(endpoint);
    socket.send(zmq::str_buffer(R"({"cmd":"stats"})"), zmq::send_flags::none);
    zmq::message_t reply;
    if (!socket.recv(reply)) return nullptr;
    json j = json::parse(reply.to_string_view(), nullptr, false);
    return j.is_object() ? j : json(nullptr);
  } catch (const zmq::error_t&) {
    return nullptr;
  }
}

json MeanBatchSize(const json& before, const json& after) {
  if (!before.is_object() || !after.is_object()) return nullptr;
  double batches = after["batches"].get<double>() - before["batches"].get<double>();
  double rows = after["rows"].get<double>() - before["rows"].get<double>();
  return batches > 0 ? Round(rows / batches, 2) : json(nullptr);
}

std::string Fixed(const json& value, int decimals) {
  if (!value.is_number()) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value.get<double>());
  return buffer;
}

}  // namespace

BenchCommand::BenchCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("bench", "Load-test a farm (closed-loop sweep or open-loop rate)");
  app_->add_option("--endpoint", endpoint_, "Supervisor endpoint")->capture_default_str();
  app_->add_option("--model", model_, "Model name (required unless --echo-server)");
  app_->add_option("--shape", shapes_, "Input shape, e.g. 1,256; once per model input");
  app_->add_option("--dtype", dtypes_, "Input dtype, once per input (one applies to all)")
      ->capture_default_str();
  concurrency_option_ =
      app_->add_option("--concurrency", concurrency_, "Clients per step (a sweep: 1,4,16,64)")
          ->delimiter(',')
          ->check(IntegerIn(1, kMaxBenchClients))
          ->capture_default_str();
  app_->add_option("--depth", depth_, "Closed loop: requests each client keeps in flight")
      ->check(IntegerIn(1, kMaxBenchDepth))
      ->capture_default_str();
  app_->add_option("--rate", rates_,
                   "Open loop: requests/s over all clients (a list: one step each)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app_->add_option("--seconds", seconds_, "Measured seconds per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app_->add_option("--warmup", warmup_, "Unmeasured seconds before each step")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app_->add_option("--requests", requests_, "End each step after this many replies (0: time only)")
      ->check(IntegerIn(0, INT64_MAX));
  app_->add_option("--threads", threads_, "Generator threads (0: min(concurrency, cores))")
      ->check(IntegerIn(0, kMaxBenchClients))
      ->capture_default_str();
  app_->add_option("--io-threads", io_threads_, "ZeroMQ I/O threads of the generator")
      ->check(IntegerIn(1, 64))
      ->capture_default_str();
  app_->add_option("--io-timeout-ms", io_timeout_ms_, "A request unanswered this long is NO_REPLY")
      ->check(IntegerIn(1, kMaxCliTimeoutMs))
      ->capture_default_str();
  app_->add_option("--timeout-ms", timeout_ms_,
                   "Server-side deadline sent with each request (0: none)")
      ->check(IntegerIn(0, kMaxCliTimeoutMs));
  app_->add_option("--admin-endpoint", admin_endpoint_,
                   "Admin socket of the farm; adds the mean batch size of each step");
  app_->add_option("--seed", seed_, "Seed of the random inputs")->capture_default_str();
  app_->add_flag("--json", json_, "Print one JSON report instead of a table");
  app_->add_flag("--shm", shm_,
                 "Send inputs and receive outputs through client shared memory (same host as "
                 "the farm, closed loop): one region per client with --depth input + output areas");
  app_->add_option("--shm-output-bytes", shm_output_bytes_,
                   "--shm: bytes of each request's output range (0: the inputs' size, right for "
                   "outputs shaped like the inputs; too small gives RESOURCE_EXHAUSTED replies)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app_->add_option("--arrival", arrival_,
                   "Open loop: gaps between sends: fixed (even), poisson, or gamma (with --cv)")
      ->check(CLI::IsMember({"fixed", "poisson", "gamma"}))
      ->capture_default_str();
  cv_option_ = app_->add_option("--cv", cv_,
                                "--arrival gamma: coefficient of variation of the gaps (4: bursty)")
                   ->check(CLI::Range(1e-3, ArrivalProcess::kMaxCv))
                   ->capture_default_str();
  app_->add_option("--slo-ms", slo_ms_,
                   "Latency objective: each step also reports the ok replies within it "
                   "(within_slo) and their rate (within_slo_per_s, goodput)")
      ->check(CLI::Range(1e-3, 86'400'000.0));
  app_->add_flag("--client-deadline", client_deadline_,
                 "With --slo-ms: send each request's own deadline, its (scheduled) start + "
                 "--slo-ms, as deadline_unix_us, so the farm counts the time before it reads "
                 "the request and refuses one that cannot make it (same host or synced clocks)");
  app_->add_option("--clients", clients_,
                   "Open loop over N tenants, each its own connection at its own rate "
                   "(--client-rates); the report lists each")
      ->check(IntegerIn(1, kMaxBenchTenants));
  app_->add_option("--client-rates", client_rates_,
                   "--clients: each tenant's requests/s, N positive numbers (e.g. 10,100)")
      ->delimiter(',');
  app_->add_option("--echo-server", echo_endpoint_,
                   "Serve as a trivial echo target on this endpoint (until SIGINT/SIGTERM)");
}

Status BenchCommand::ParseShape(const std::string& text, std::vector<int64_t>* shape) {
  shape->clear();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // Each dimension whole or refused: strtoll would saturate 2^64 to 2^63-1 without a word.
    int64_t value = 0;
    if (Status s = IntegerFromText(part, "--shape '" + text + "'", 0, INT64_MAX, &value); !s.ok()) {
      return InvalidArgument(s.message() + " (non-negative integers like 1,256)");
    }
    shape->push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (shape->size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument("--shape '" + text + "': rank above " + std::to_string(kMaxRank));
  }
  return Status::Ok();
}

Status BenchCommand::BuildInputs(std::vector<TensorSpec>* inputs) const {
  if (shapes_.empty()) return InvalidArgument("--shape is required (e.g. --shape 1,256)");
  if (dtypes_.size() != 1 && dtypes_.size() != shapes_.size()) {
    return InvalidArgument("give one --dtype, or one per --shape");
  }
  for (size_t i = 0; i < shapes_.size(); ++i) {
    TensorSpec spec;
    const std::string& name = dtypes_.size() == 1 ? dtypes_[0] : dtypes_[i];
    auto dtype = ParseDType(name);
    if (!dtype)
      return InvalidArgument("--dtype '" + name + "': expected one of " + AllDTypeNames());
    spec.dtype = *dtype;
    if (Status s = ParseShape(shapes_[i], &spec.shape); !s.ok()) return s;
    inputs->push_back(std::move(spec));
  }
  return Status::Ok();
}

json BenchCommand::StepJson(int concurrency, int depth, double rate, const StepResult& r,
                            const json& mean_batch_size) {
  json step = {{"concurrency", concurrency},
               {"depth", rate > 0 ? json(nullptr) : json(depth)},
               {"target_rate", rate > 0 ? json(rate) : json(nullptr)},
               {"window_s", Round(r.window_s, 3)},
               {"sent", r.sent},
               {"ok", r.ok},
               {"requests_per_s", Round(r.requests_per_s, 1)},
               {"ok_per_s", Round(r.ok_per_s, 1)},
               {"reply_mb_per_s", Round(r.reply_bytes_per_s / 1e6, 2)},
               {"latency_us", LatencyJson(r.latency)},
               {"errors", r.errors},
               {"error_count", r.error_count},
               {"mean_batch_size", mean_batch_size},
               {"server_us",
                {{"queue", ServerMean(r.server_queue_us)},
                 {"compute", ServerMean(r.server_compute_us)},
                 {"total", ServerMean(r.server_total_us)}}}};
  if (rate > 0) step["send_lag_us"] = LatencyJson(r.send_lag);
  if (r.within_slo >= 0) {
    step["within_slo"] = r.within_slo;
    step["within_slo_per_s"] = Round(r.within_slo_per_s, 1);
  }
  return step;
}

json BenchCommand::ModelCounters() const {
  if (admin_endpoint_.empty()) return nullptr;
  json stats = AdminStats(admin_endpoint_);
  if (!stats.is_object() || !stats.contains("models")) return nullptr;
  for (const auto& m : stats["models"]) {
    if (m.value("name", "") != model_) continue;
    double batches = m.value("batches", 0.0);
    return {{"batches", batches}, {"rows", std::round(m.value("mean_batch_size", 0.0) * batches)}};
  }
  return nullptr;
}

int BenchCommand::Run() {
  if (!echo_endpoint_.empty()) {
    EchoStats stats;
    Status s = RunEchoServer(echo_endpoint_, &stats);
    if (!s.ok()) return ReportError(s, kExitUsage);
    std::cerr << "echo server stopped after " << stats.requests << " requests (" << stats.fallbacks
              << " parsed the slow way)\n";
    return kExitOk;
  }
  if (model_.empty()) return ReportError(InvalidArgument("--model is required"), kExitUsage);
  if (arrival_ != "fixed" && rates_.empty() && client_rates_.empty()) {
    return ReportError(InvalidArgument("--arrival " + arrival_ +
                                       " draws the gaps of the open loop: it needs --rate (or "
                                       "--clients with --client-rates)"),
                       kExitUsage);
  }
  if (cv_option_->count() > 0 && arrival_ != "gamma") {
    return ReportError(InvalidArgument("--cv is the spread of --arrival gamma; got --arrival " +
                                       arrival_ + " (poisson's cv is 1, fixed's 0)"),
                       kExitUsage);
  }
  if (client_deadline_ && slo_ms_ <= 0) {
    return ReportError(InvalidArgument("--client-deadline sends start + --slo-ms as each "
                                       "request's deadline: it needs --slo-ms"),
                       kExitUsage);
  }
  std::vector<double> client_rates;
  if (Status s = CheckClientFlags(&client_rates); !s.ok()) return ReportError(s, kExitUsage);
  std::vector<TensorSpec> inputs;
  if (Status s = BuildInputs(&inputs); !s.ok()) return ReportError(s, kExitUsage);
  return client_rates.empty() ? RunSteps(inputs) : RunClients(inputs, client_rates);
}

Status BenchCommand::ParseClientRates(const std::vector<std::string>& text, int clients,
                                      std::vector<double>* rates) {
  std::string got;
  for (const std::string& part : text) got += (got.empty() ? "" : ",") + part;
  const std::string expected = "--client-rates: expected " + std::to_string(clients) +
                               " positive rates in requests/s (one per --clients " +
                               std::to_string(clients) + "), got ";
  if (text.size() != static_cast<size_t>(clients)) {
    return InvalidArgument(expected + std::to_string(text.size()) + " ('" + got + "')");
  }
  rates->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string& part = text[i];
    char* end = nullptr;
    const double rate = part.empty() ? 0 : std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !std::isfinite(rate) || rate <= 0) {
      return InvalidArgument(expected + "'" + part + "' as rate " + std::to_string(i + 1) + " ('" +
                             got + "')");
    }
    rates->push_back(rate);
  }
  return Status::Ok();
}

Status BenchCommand::CheckClientFlags(std::vector<double>* rates) const {
  if (clients_ == 0 && client_rates_.empty()) return Status::Ok();
  if (clients_ == 0) {
    return InvalidArgument(
        "--client-rates gives each tenant's rate: it needs --clients N, got "
        "none");
  }
  if (client_rates_.empty()) {
    return InvalidArgument("--clients " + std::to_string(clients_) + " needs --client-rates with " +
                           std::to_string(clients_) + " rates (requests/s each), got none");
  }
  if (!rates_.empty()) {
    return InvalidArgument("--clients sets each tenant's rate with --client-rates: drop --rate");
  }
  if (concurrency_option_->count() > 0) {
    return InvalidArgument(
        "--clients N is the concurrency (one connection per tenant): drop "
        "--concurrency");
  }
  if (shm_) return InvalidArgument("--shm works in the closed loop only; --clients is open loop");
  if (requests_ > 0) {
    return InvalidArgument(
        "--requests ends one generator's window; with --clients each tenant "
        "runs for --seconds: drop --requests");
  }
  return ParseClientRates(client_rates_, clients_, rates);
}

LoadSpec BenchCommand::BaseSpec(const std::vector<TensorSpec>& inputs) const {
  LoadSpec spec{endpoint_, model_, inputs};
  spec.depth = depth_;
  spec.warmup_s = warmup_;
  spec.seconds = seconds_;
  spec.max_requests = requests_;
  spec.io_threads = io_threads_;
  spec.io_timeout_ms = io_timeout_ms_;
  spec.timeout_ms = timeout_ms_;
  spec.shm = shm_;
  spec.shm_output_bytes = shm_output_bytes_;
  (void)ParseArrival(arrival_, &spec.arrival);  // CLI11 accepted only the three names
  spec.cv = cv_;
  spec.slo_ms = slo_ms_;
  spec.client_deadline = client_deadline_;
  return spec;
}

json BenchCommand::ClientJson(int client, double rate, const StepResult& r) {
  json row = {{"client", client},
              {"target_rate", rate},
              {"sent", r.sent},
              {"ok", r.ok},
              {"ok_per_s", Round(r.ok_per_s, 1)},
              {"errors", r.errors},
              {"error_count", r.error_count},
              {"latency_us", LatencyJson(r.latency)}};
  if (r.within_slo >= 0) {
    row["within_slo"] = r.within_slo;
    row["within_slo_per_s"] = Round(r.within_slo_per_s, 1);
  }
  return row;
}

int BenchCommand::RunClients(const std::vector<TensorSpec>& inputs,
                             const std::vector<double>& rates) {
  json specs = json::array();
  for (const auto& spec : inputs)
    specs.push_back({{"dtype", DTypeName(spec.dtype)}, {"shape", spec.shape}});
  json report = {{"endpoint", endpoint_}, {"model", model_},     {"inputs", specs},
                 {"mode", "open"},        {"seconds", seconds_}, {"warmup", warmup_},
                 {"shm", false},          {"arrival", arrival_}, {"clients", clients_},
                 {"client_rates", rates}, {"threads", clients_}, {"steps", json::array()}};
  report["cv"] = arrival_ == "gamma" ? cv_ : arrival_ == "poisson" ? 1.0 : 0.0;
  if (slo_ms_ > 0) report["slo_ms"] = slo_ms_;
  // One generator (one thread, one connection) per tenant, all started before any window opens.
  std::vector<std::unique_ptr<LoadGenerator>> generators;
  for (size_t i = 0; i < rates.size(); ++i) {
    LoadSpec spec = BaseSpec(inputs);
    spec.concurrency = 1;
    spec.threads = 1;
    spec.rate = rates[i];
    spec.seed = seed_ + i;
    generators.push_back(std::make_unique<LoadGenerator>(spec));
  }
  for (auto& generator : generators) {
    if (Status s = generator->Start(); !s.ok()) return ReportError(s, StartFailureExit(s));
  }
  std::this_thread::sleep_until(generators.back()->measure_begin());
  json before = ModelCounters();
  for (auto& generator : generators) generator->WaitMeasureEnd();
  json after = ModelCounters();
  std::vector<StepResult> results;
  json rows = json::array();
  double total_rate = 0;
  for (size_t i = 0; i < generators.size(); ++i) {
    results.push_back(generators[i]->Finish());
    rows.push_back(ClientJson(static_cast<int>(i), rates[i], results.back()));
    total_rate += rates[i];
  }
  const StepResult merged = MergeStepResults(results, slo_ms_);
  json step = StepJson(clients_, depth_, total_rate, merged, MeanBatchSize(before, after));
  step["clients"] = std::move(rows);
  report["steps"].push_back(std::move(step));
  report["total_errors"] = merged.error_count;
  if (json_) {
    std::cout << report.dump(2) << std::endl;
  } else {
    PrintTable(report);
    PrintClients(report["steps"].back());
  }
  if (merged.ok == 0 && merged.error_count == 0) {
    std::cerr << "error: no reply from " << endpoint_ << "\n";
    return kExitTransport;
  }
  return merged.error_count > 0 ? kExitServerError : kExitOk;
}

int BenchCommand::RunSteps(const std::vector<TensorSpec>& inputs) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  json specs = json::array();
  for (const auto& spec : inputs)
    specs.push_back({{"dtype", DTypeName(spec.dtype)}, {"shape", spec.shape}});
  json report = {{"endpoint", endpoint_}, {"model", model_},
                 {"inputs", specs},       {"mode", rates_.empty() ? "closed" : "open"},
                 {"seconds", seconds_},   {"warmup", warmup_},
                 {"shm", shm_},           {"steps", json::array()}};
  if (!rates_.empty()) {
    report["arrival"] = arrival_;
    report["cv"] = arrival_ == "gamma" ? cv_ : arrival_ == "poisson" ? 1.0 : 0.0;
  }
  if (slo_ms_ > 0) report["slo_ms"] = slo_ms_;
  std::vector<double> rates = rates_.empty() ? std::vector<double>{0.0} : rates_;
  int64_t errors = 0, ok = 0;
  for (double rate : rates) {
    for (int concurrency : concurrency_) {
      LoadSpec spec = BaseSpec(inputs);
      spec.concurrency = concurrency;
      spec.rate = rate;
      spec.threads = threads_ > 0 ? threads_ : std::min(concurrency, cores);
      spec.seed = seed_ + static_cast<uint64_t>(report["steps"].size());
      report["threads"] = spec.threads;
      LoadGenerator generator(spec);
      if (Status s = generator.Start(); !s.ok()) return ReportError(s, StartFailureExit(s));
      std::this_thread::sleep_until(generator.measure_begin());
      json before = ModelCounters();
      generator.WaitMeasureEnd();
      json after = ModelCounters();
      StepResult result = generator.Finish();
      if (shm_) report["shm_region_bytes"] = result.shm_region_bytes;
      if (!result.shm_release.ok()) {
        std::cerr << "warning: --shm: releasing a region failed: " << result.shm_release.ToString()
                  << "\n";
      }
      errors += result.error_count;
      ok += result.ok;
      report["steps"].push_back(
          StepJson(concurrency, depth_, rate, result, MeanBatchSize(before, after)));
      if (!json_) PrintTable(report);
    }
  }
  report["total_errors"] = errors;
  if (json_) std::cout << report.dump(2) << std::endl;
  if (ok == 0 && errors == 0) {
    std::cerr << "error: no reply from " << endpoint_ << " in any step\n";
    return kExitTransport;
  }
  return errors > 0 ? kExitServerError : kExitOk;
}

void BenchCommand::PrintClients(const json& step) const {
  std::printf("%-6s %-9s %9s %9s %7s %9s %9s%s\n", "client", "rate", "sent", "ok", "errors",
              "p50_us", "p99_us", step.contains("within_slo") ? "  in_slo   in_slo/s" : "");
  for (const json& c : step["clients"]) {
    char slo[48] = "";
    if (c.contains("within_slo")) {
      std::snprintf(slo, sizeof(slo), " %7lld %10s",
                    static_cast<long long>(c["within_slo"].get<int64_t>()),
                    Fixed(c["within_slo_per_s"], 1).c_str());
    }
    std::printf(
        "%-6d %-9s %9lld %9lld %7lld %9s %9s%s\n", c["client"].get<int>(),
        Fixed(c["target_rate"], 0).c_str(), static_cast<long long>(c["sent"].get<int64_t>()),
        static_cast<long long>(c["ok"].get<int64_t>()),
        static_cast<long long>(c["error_count"].get<int64_t>()),
        Fixed(c["latency_us"]["p50"], 1).c_str(), Fixed(c["latency_us"]["p99"], 1).c_str(), slo);
  }
  std::fflush(stdout);
}

void BenchCommand::PrintTable(const json& report) const {
  const json& steps = report["steps"];
  const bool slo = report.contains("slo_ms");
  if (steps.size() == 1) {
    std::printf("%-6s %-6s %-9s %11s %9s %9s %9s %9s %7s %6s%s\n", "conc", "depth", "rate", "req/s",
                "p50_us", "p90_us", "p99_us", "p999_us", "errors", "batch",
                slo ? "   in_slo/s" : "");
  }
  const json& s = steps.back();
  const json& l = s["latency_us"];
  char goodput[32] = "";
  if (slo)
    std::snprintf(goodput, sizeof(goodput), " %10s", Fixed(s["within_slo_per_s"], 1).c_str());
  std::printf("%-6d %-6s %-9s %11s %9s %9s %9s %9s %7lld %6s%s\n", s["concurrency"].get<int>(),
              Fixed(s["depth"], 0).c_str(), Fixed(s["target_rate"], 0).c_str(),
              Fixed(s["requests_per_s"], 1).c_str(), Fixed(l["p50"], 1).c_str(),
              Fixed(l["p90"], 1).c_str(), Fixed(l["p99"], 1).c_str(), Fixed(l["p999"], 1).c_str(),
              static_cast<long long>(s["error_count"].get<int64_t>()),
              Fixed(s["mean_batch_size"], 2).c_str(), goodput);
  for (const auto& [code, n] : s["errors"].items()) {
    std::printf("       %s: %lld\n", code.c_str(), static_cast<long long>(n.get<int64_t>()));
  }
  std::fflush(stdout);
}

}  // namespace torchfarm
