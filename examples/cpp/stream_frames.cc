// Streams "video frames" through a farm with the pipelined client API: keeps --in-flight requests
// outstanding (Send), takes replies as they come (Receive), and prints frames per second and
// per-frame latency (send to reply) once a second and at the end.
//
//   build/bin/stream_frames --endpoint tcp://127.0.0.1:5555 --model convnet --frames 2000
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "torchfarm/client.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  size_t k = static_cast<size_t>(q * (values.size() - 1));
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

void PrintWindow(const char* label, size_t frames, double seconds, const std::vector<double>& ms) {
  std::printf("%s frames=%zu fps=%.1f latency_ms p50=%.2f p90=%.2f p99=%.2f\n", label, frames,
              seconds > 0 ? frames / seconds : 0.0, Percentile(ms, 0.5), Percentile(ms, 0.9),
              Percentile(ms, 0.99));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Streams frames through a torchfarm model and prints fps and latency"};
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string model = "convnet";
  std::vector<int64_t> shape = {1, 3, 32, 32};
  int frames = 1000;
  int in_flight = 4;
  int timeout_ms = 10000;
  app.add_option("--endpoint", endpoint, "the farm's job endpoint")->capture_default_str();
  app.add_option("--model", model, "a float32 model")->capture_default_str();
  app.add_option("--shape", shape, "shape of one frame")->capture_default_str();
  app.add_option("--frames", frames, "frames to send")->capture_default_str();
  app.add_option("--in-flight", in_flight, "requests outstanding at once")->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "wait for each reply at most")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  torchfarm::Client client(endpoint, timeout_ms);
  if (!client.connect_status().ok()) {
    std::fprintf(stderr, "error: %s\n", client.connect_status().ToString().c_str());
    return 2;
  }
  torchfarm::TensorSpec spec{torchfarm::DType::kFloat32, shape};
  std::vector<float> frame(*torchfarm::NumElements(shape));
  std::mt19937 random(8);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);

  std::map<uint64_t, SteadyClock::time_point> sent_at;  // request id -> send time
  std::vector<double> all_ms, window_ms;
  int sent = 0, received = 0;
  size_t window_frames = 0;
  auto start = SteadyClock::now();
  auto window_start = start;
  while (received < frames) {
    while (sent < frames && static_cast<int>(sent_at.size()) < in_flight) {
      for (float& value : frame) value = pixel(random);  // a new "frame"; Send copies it
      uint64_t id = 0;
      torchfarm::Status s =
          client.Send(model, {{spec, frame.data(), frame.size() * sizeof(float)}}, {}, &id);
      if (!s.ok()) {
        std::fprintf(stderr, "error: send: %s\n", s.ToString().c_str());
        return 1;
      }
      sent_at[id] = SteadyClock::now();
      ++sent;
    }
    torchfarm::InferResult result;
    uint64_t id = 0;
    torchfarm::Status s = client.Receive(&result, &id, timeout_ms);
    if (!s.ok()) {
      std::fprintf(stderr, "error: frame %d: %s\n", received, s.ToString().c_str());
      return 1;
    }
    auto now = SteadyClock::now();
    double ms = std::chrono::duration<double, std::milli>(now - sent_at[id]).count();
    sent_at.erase(id);
    all_ms.push_back(ms);
    window_ms.push_back(ms);
    ++received;
    ++window_frames;
    double window_s = std::chrono::duration<double>(now - window_start).count();
    if (window_s >= 1.0) {
      PrintWindow("window", window_frames, window_s, window_ms);
      window_ms.clear();
      window_frames = 0;
      window_start = now;
    }
  }
  double total_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
  PrintWindow("total ", all_ms.size(), total_s, all_ms);
  return 0;
}
