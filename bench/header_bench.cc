// Header parse and serialise: the JSON work per request on both sides of the wire.
//   supervisor: ParseJob (header JSON, model lookup, frame checks), MakeOkReply, MakeErrorReply
//   client:     the C++ client's ParseReplyHeader (full JSON) and the bench's template + scan
// Request: identity [1, 256] float32, as `torchfarm bench` sends it; ParseJob's figure includes
// building the three zmq frames it consumes (what a receive allocates anyway).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "common/protocol.h"
#include "supervisor/intake/job_intake.h"
#include "tools/bench_protocol.h"

namespace torchfarm {
namespace {

const std::vector<TensorSpec> kInputs = {TensorSpec{DType::kFloat32, {1, 256}}};

std::vector<ModelConfig> Models() {
  ModelConfig identity;
  identity.name = "identity";
  identity.inputs = {TensorSpec{DType::kFloat32, {-1, 256}}};
  return {identity};
}

void BM_ParseJob(benchmark::State& state) {
  const std::vector<ModelConfig> models = Models();
  const std::string header = RequestTemplate("identity", kInputs).Build(123456789);
  const std::string identity(5, 'x');
  int64_t ok = 0;
  for (auto _ : state) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(identity.data(), identity.size());
    frames.emplace_back(header.data(), header.size());
    frames.emplace_back(static_cast<size_t>(1024));
    PendingRequest request;
    size_t start = 0, index = 0;
    SplitEnvelope(frames, &request, &start);
    ok += ParseJob(frames, start, models, TimePoint{}, &request, &index).ok();
  }
  if (ok != state.iterations()) state.SkipWithError("ParseJob rejected the request");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseJob);

void BM_ParseRequestHeader(benchmark::State& state) {
  const std::string header = RequestTemplate("identity", kInputs).Build(123456789);
  for (auto _ : state) {
    RequestHeader parsed;
    benchmark::DoNotOptimize(ParseRequestHeader(header, &parsed).ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseRequestHeader);

void BM_MakeOkReply(benchmark::State& state) {
  const nlohmann::json id = 123456789;
  const std::vector<TensorSpec> outputs = {TensorSpec{DType::kFloat32, {1, 128}}};
  StageTimes timing{41, 380, 530};
  for (auto _ : state) benchmark::DoNotOptimize(MakeOkReply(id, outputs, timing, 1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MakeOkReply);

void BM_MakeErrorReply(benchmark::State& state) {
  const nlohmann::json id = 123456789;
  const Status status = ResourceExhausted("queue of model 'identity' is full (1024 requests)");
  for (auto _ : state) benchmark::DoNotOptimize(MakeErrorReply(id, status));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MakeErrorReply);

void BM_ClientParseReplyHeader(benchmark::State& state) {
  const std::string reply =
      MakeOkReply(123456789, {TensorSpec{DType::kFloat32, {1, 128}}}, {41, 380, 530}, 1);
  for (auto _ : state) {
    ReplyHeader parsed;
    benchmark::DoNotOptimize(ParseReplyHeader(reply, &parsed).ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClientParseReplyHeader);

void BM_BenchRequestTemplate(benchmark::State& state) {
  const RequestTemplate request("identity", kInputs);
  uint64_t id = 1;
  for (auto _ : state) benchmark::DoNotOptimize(request.Build(++id));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BenchRequestTemplate);

void BM_BenchScanReply(benchmark::State& state) {
  const std::string reply =
      MakeOkReply(123456789, {TensorSpec{DType::kFloat32, {1, 128}}}, {41, 380, 530}, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ScanReply(reply).ok);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BenchScanReply);

}  // namespace
}  // namespace torchfarm
