// GrpcServer: gRPC's callback API. A handler runs on one of gRPC's threads, converts the request
// (grpc_service.h, v2_inference.h) and posts it to a FarmChannel, chosen round robin; the channel
// sends it to the loop and, on its own thread, fills the response from the reply and finishes the
// call. No thread waits for the farm.
#include "supervisor/frontend/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "proto/grpc_service.grpc.pb.h"
#include "supervisor/frontend/grpc_service.h"
#include "supervisor/frontend/grpc_stream.h"
#include "supervisor/frontend/triton_model_config.h"
#include "supervisor/frontend/triton_model_stats.h"
#include "supervisor/frontend/v2_client_id.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_repository.h"
#include "supervisor/frontend/v2_system_shm.h"

namespace torchfarm {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Streams one HTTP/2 connection may hold open; the farm's per-client quota bounds the rest.
constexpr int kMaxConcurrentStreams = 1024;
// Memory gRPC may hold in buffers (ResourceQuota): a few messages of the largest allowed size.
constexpr uint64_t kMinQuotaBytes = uint64_t{256} << 20;
constexpr uint64_t kQuotaMessages = 4;

int64_t ElapsedMicros(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

Status ReadPemFile(const std::string& path, const char* what, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  if (file) text << file.rdbuf();
  if (!file || text.str().empty()) {
    return InvalidArgument("frontend.tls." + std::string(what) + " '" + path +
                           "': cannot read a PEM file there");
  }
  *out = text.str();
  return Status::Ok();
}

// The client's gRPC deadline becomes the farm's timeout_ms when it is the nearer one.
Status ApplyDeadline(const grpc::CallbackServerContext& context, V2InferRequest* request) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Status::Ok();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::system_clock::now())
                        .count() +
                    1;
  if (left <= 0) return Status(StatusCode::kDeadlineExceeded, "the call's deadline had passed");
  if (request->timeout_ms == 0 || left < request->timeout_ms) request->timeout_ms = left;
  return Status::Ok();
}

// The call's tag (frontend_tag.h): named by its metadata `client_id_header` (already lowercase,
// as gRPC's metadata keys are) when the config sets one and the call carries it; else its peer's.
Status CallTag(const grpc::ServerContextBase& context, const std::string& client_id_header,
               std::string* tag) {
  std::vector<std::string_view> values;
  if (!client_id_header.empty()) {
    auto [entry, end] = context.client_metadata().equal_range(grpc::string_ref(client_id_header));
    for (; entry != end; ++entry) values.emplace_back(entry->second.data(), entry->second.size());
  }
  return V2RequestTag(RequestOrigin::kGrpc, context.peer(), client_id_header, values, tag);
}

}  // namespace

class GrpcServer::Impl final : public inference::GRPCInferenceService::CallbackService {
 public:
  Impl(const FrontendConfig& config, std::vector<FarmChannel*> channels, FrontendStats* stats)
      : config_(config), channels_(std::move(channels)), stats_(stats) {}
  ~Impl() override { Stop(); }

  Status Start();
  void Stop();
  int port() const { return port_; }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    return Meta(context, "", [response](const json& meta) {
      response->set_live(meta.value("live", false));
      return Status::Ok();
    });
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    return Meta(context, "", [response](const json& meta) {
      response->set_ready(meta.value("ready", false));
      return Status::Ok();
    });
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override {
    return Meta(context, request->name(),
                [name = request->name(), version = request->version(), response](const json& meta) {
                  // As Triton: a model or version that is not served is not ready (false, not
                  // NOT_FOUND), so `while not is_model_ready()` loops keep polling.
                  const json* model = nullptr;
                  Status s = FindModelInMeta(meta, name, version, &model);
                  response->set_ready(s.ok() && model->value("ready", false));
                  return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
                });
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override {
    return Meta(context, request->name(),
                [name = request->name(), version = request->version(), response](const json& meta) {
                  const json* model = nullptr;
                  Status s = FindModelInMeta(meta, name, version, &model);
                  return s.ok() ? ModelMetadataFromJson(*model, response) : s;
                });
  }
  // Triton's model configuration and statistics extensions, from the same JSON as HTTP's.
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override {
    return Meta(context, request->name(),
                [name = request->name(), version = request->version(), response](const json& meta) {
                  const json* model = nullptr;
                  Status s = FindModelInMeta(meta, name, version, &model);
                  return s.ok() ? MessageFromJson(TritonModelConfigJson(*model),
                                                  response->mutable_config())
                                : s;
                });
  }
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override {
    return Meta(
        context, request->name(),
        [name = request->name(), version = request->version(), response](const json& meta) {
          json stats;
          Status s = TritonModelStatsJson(meta, name, version, &stats);
          return s.ok() ? MessageFromJson(stats, response) : s;
        },
        /*statistics=*/true);
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) override;
  // The model repository extension (v2_repository.h).
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override {
    return OnChannel(
        context, [ready = request->ready(), response](FarmChannel& channel, Finish finish) {
          RepositoryIndexCall(channel, ready, [response, finish](Status s, json models) {
            finish(s, [&] { return MessageFromJson({{"models", models}}, response); });
          });
        });
  }
  // The logging extension: an empty map reads the settings, a map sets them.
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override {
    json settings = json::object();
    Status refused = LogSettingsFromProto(*request, &settings);
    return OnChannel(context, [refused, settings, response](FarmChannel& channel, Finish finish) {
      if (!refused.ok()) return finish(refused, [] { return Status::Ok(); });
      LogSettingsCall(channel, settings, [response, finish](Status s, json now) {
        finish(s, [&] {
          LogSettingsToProto(now, response);
          return Status::Ok();
        });
      });
    });
  }
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse*) override {
    return Control(context, true, request->model_name(), request->parameters());
  }
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse*) override {
    return Control(context, false, request->model_name(), request->parameters());
  }
  // Triton's system shared memory extension (v2_system_shm.h), for loopback peers when
  // frontend.system_shared_memory is on.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override {
    json query = {{"system_shared_memory", "status"}};
    if (!request->name().empty()) query["name"] = request->name();
    return SystemShm(context, std::move(query), [response](const json& answer) {
      auto& regions = *response->mutable_regions();
      for (const json& r : answer.value("regions", json::array())) {
        auto& region = regions[r.value("name", "")];
        region.set_name(r.value("name", ""));
        region.set_key(r.value("key", ""));
        region.set_offset(r.value("offset", uint64_t{0}));
        region.set_byte_size(r.value("byte_size", uint64_t{0}));
      }
    });
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse*) override {
    json query = {{"system_shared_memory", "register"},
                  {"name", request->name()},
                  {"key", request->key()},
                  {"offset", request->offset()},
                  {"byte_size", request->byte_size()}};
    return SystemShm(context, std::move(query), [](const json&) {});
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse*) override {
    json query = {{"system_shared_memory", "unregister"}};
    if (!request->name().empty()) query["name"] = request->name();
    return SystemShm(context, std::move(query), [](const json&) {});
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

 private:
  class Call;
  using OnReply = std::function<Status(FarmReply& reply)>;
  // Ends a call begun by OnChannel: `fill` writes the response (only while the call is the
  // caller's to finish) when `status` is OK, and its status finishes the call.
  using Finish = std::function<void(Status status, const std::function<Status()>& fill)>;

  // Runs `work` on the next channel's thread; it ends the call with `finish`, once.
  grpc::ServerUnaryReactor* OnChannel(grpc::CallbackServerContext* context,
                                      std::function<void(FarmChannel&, Finish)> work);
  // A system shared memory query (v2_system_shm.h) after the config and peer checks; `fill`
  // writes the response from the loop's answer.
  grpc::ServerUnaryReactor* SystemShm(grpc::CallbackServerContext* context, json query,
                                      std::function<void(const json&)> fill);
  grpc::ServerUnaryReactor* Control(
      grpc::CallbackServerContext* context, bool load, const std::string& model,
      const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& parameters);

  // A registered call, or null when the server is stopping (the call is then finished already).
  std::shared_ptr<Call> Begin(grpc::ServerUnaryReactor* reactor);
  void Forget(Call* call);
  // Sends header + frames to the loop through the next channel; `on_reply` fills the response
  // from an OK reply (on the channel's thread) and its status finishes the call.
  // `Header`: a JSON header (a "meta" query) or a typed RequestHeader (an inference).
  template <typename Header>
  void Submit(std::shared_ptr<Call> call, std::string tag, Header header,
              std::vector<zmq::message_t> frames, OnReply on_reply);
  // A "meta" query (farm_channel.h) for `model` (empty: every model), with each model's
  // counters when `statistics`; `fill` reads the reply.
  grpc::ServerUnaryReactor* Meta(grpc::CallbackServerContext* context, const std::string& model,
                                 std::function<Status(const json& meta)> fill,
                                 bool statistics = false);

  const FrontendConfig config_;
  const std::vector<FarmChannel*> channels_;
  FrontendStats* const stats_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<size_t> next_channel_{0};
  std::mutex mutex_;  // guards live_, streams_ and stopping_
  std::unordered_map<Call*, std::shared_ptr<Call>> live_;
  std::unordered_map<GrpcStream*, std::weak_ptr<GrpcStream>> streams_;
  bool stopping_ = false;
};

// One call in flight. The channel's reply and Stop may both want to finish it: the first to
// Claim() owns the response object and calls Finish; the other leaves it alone.
class GrpcServer::Impl::Call {
 public:
  Call(Impl* owner, grpc::ServerUnaryReactor* reactor) : owner_(owner), reactor_(reactor) {}

  bool Claim() { return !claimed_.exchange(true, std::memory_order_acq_rel); }
  // After a successful Claim(): counts the call and ends it with `status`.
  void Finish(const Status& status) {
    owner_->stats_->Record(FrontendProtocol::kGrpc, status.code(), ElapsedMicros(received_),
                           farm_us_);
    owner_->Forget(this);
    reactor_->Finish(ToGrpcStatus(status));
  }
  void MarkSent() { sent_ = Clock::now(); }
  void MarkAnswered() { farm_us_ = ElapsedMicros(sent_); }

 private:
  Impl* const owner_;
  grpc::ServerUnaryReactor* const reactor_;
  const Clock::time_point received_ = Clock::now();
  Clock::time_point sent_ = received_;
  int64_t farm_us_ = 0;
  std::atomic<bool> claimed_{false};
};

Status GrpcServer::Impl::Start() {
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (config_.tls.enabled()) {
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (Status s = ReadPemFile(config_.tls.key_file, "key_file", &pair.private_key); !s.ok()) {
      return s;
    }
    if (Status s = ReadPemFile(config_.tls.cert_file, "cert_file", &pair.cert_chain); !s.ok()) {
      return s;
    }
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(options);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.grpc_endpoint, credentials, &port_);
  builder.RegisterService(this);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(config_.max_body_bytes, INT_MAX)));
  grpc::ResourceQuota quota("torchfarm-grpc");
  quota.Resize(std::max(kMinQuotaBytes, kQuotaMessages * config_.max_body_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  // gRPC binds with SO_REUSEPORT by default: a second farm on the same port would then share its
  // connections instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::min<int64_t>(config_.idle_timeout_ms, INT_MAX)));
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return Unavailable("grpc_endpoint '" + config_.grpc_endpoint +
                       "': gRPC could not listen there (expected a free HOST:PORT; see the log "
                       "line above for gRPC's reason)");
  }
  return Status::Ok();
}

void GrpcServer::Impl::Stop() {
  std::unordered_map<Call*, std::shared_ptr<Call>> calls;
  std::unordered_map<GrpcStream*, std::weak_ptr<GrpcStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    calls.swap(live_);
    streams.swap(streams_);
  }
  for (const auto& [address, weak] : streams) {
    if (auto stream = weak.lock())
      stream->Close(ToGrpcStatus(Unavailable("the gRPC front end is shutting down")));
  }
  for (const auto& [address, call] : calls) {
    if (call->Claim()) call->Finish(Unavailable("the gRPC front end is shutting down"));
  }
  // Every call is finished now (or finishes at once when it arrives), so this returns promptly.
  if (server_) server_->Shutdown();
}

std::shared_ptr<GrpcServer::Impl::Call> GrpcServer::Impl::Begin(grpc::ServerUnaryReactor* reactor) {
  auto call = std::make_shared<Call>(this, reactor);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      live_.emplace(call.get(), call);
      return call;
    }
  }
  call->Claim();
  call->Finish(Unavailable("the gRPC front end is shutting down"));
  return nullptr;
}

void GrpcServer::Impl::Forget(Call* call) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.erase(call);
}

template <typename Header>
void GrpcServer::Impl::Submit(std::shared_ptr<Call> call, std::string tag, Header header,
                              std::vector<zmq::message_t> frames, OnReply on_reply) {
  FarmChannel* channel =
      channels_[next_channel_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
  // Post takes a copyable function; the message frames are move-only, so they ride in a
  // shared holder.
  struct Payload {
    Header header;
    std::vector<zmq::message_t> frames;
  };
  auto payload = std::make_shared<Payload>(Payload{std::move(header), std::move(frames)});
  channel->Post([channel, call = std::move(call), tag = std::move(tag), payload,
                 on_reply = std::move(on_reply)]() {
    call->MarkSent();
    channel->Call(tag, std::move(payload->header), std::move(payload->frames),
                  [call, on_reply](FarmReply reply) {
                    if (!call->Claim()) return;  // Stop finished it already
                    call->MarkAnswered();
                    Status status = reply.status;
                    if (status.ok()) status = on_reply(reply);
                    call->Finish(status);
                  });
  });
}

grpc::ServerUnaryReactor* GrpcServer::Impl::Meta(grpc::CallbackServerContext* context,
                                                 const std::string& model,
                                                 std::function<Status(const json& meta)> fill,
                                                 bool statistics) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Call> call = Begin(reactor);
  if (!call) return reactor;
  json header = json::object();
  if (!model.empty()) header["model"] = model;
  if (statistics) header["statistics"] = true;
  Submit(std::move(call), kMetaTag, std::move(header), {},
         [fill = std::move(fill)](FarmReply& reply) { return fill(reply.header.raw); });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcServer::Impl::OnChannel(
    grpc::CallbackServerContext* context, std::function<void(FarmChannel&, Finish)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Call> call = Begin(reactor);
  if (!call) return reactor;
  FarmChannel* channel =
      channels_[next_channel_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
  channel->Post([channel, call = std::move(call), work = std::move(work)]() {
    call->MarkSent();
    work(*channel, [call](Status status, const std::function<Status()>& fill) {
      if (!call->Claim()) return;  // Stop finished it already
      call->MarkAnswered();
      if (status.ok()) status = fill();
      call->Finish(status);
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcServer::Impl::Control(
    grpc::CallbackServerContext* context, bool load, const std::string& model,
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& parameters) {
  Status refused = Status::Ok();
  for (const auto& [name, value] : parameters) {
    if (refused = CheckRepositoryParameter(name); !refused.ok()) break;
  }
  return OnChannel(context, [refused, load, model](FarmChannel& channel, Finish finish) {
    auto ok = [] { return Status::Ok(); };
    if (!refused.ok()) return finish(refused, ok);
    RepositoryControlCall(channel, load, model, [finish, ok](Status s) { finish(s, ok); });
  });
}

grpc::ServerUnaryReactor* GrpcServer::Impl::SystemShm(grpc::CallbackServerContext* context,
                                                      json query,
                                                      std::function<void(const json&)> fill) {
  const Status refused =
      SystemShmAllowed(config_.system_shared_memory, context->peer(), StatusCode::kUnavailable);
  return OnChannel(context, [refused, query = std::move(query), fill = std::move(fill)](
                                FarmChannel& channel, Finish finish) mutable {
    if (!refused.ok()) return finish(refused, [] { return Status::Ok(); });
    SystemShmCall(channel, std::move(query), [fill, finish](Status s, json answer) {
      finish(s, [&] {
        fill(answer);
        return Status::Ok();
      });
    });
  });
}

grpc::ServerUnaryReactor* GrpcServer::Impl::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Call> call = Begin(reactor);
  if (call && call->Claim()) {
    FillServerMetadata(response, config_.system_shared_memory);
    call->Finish(Status::Ok());
  }
  return reactor;
}

grpc::ServerUnaryReactor* GrpcServer::Impl::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Call> call = Begin(reactor);
  if (!call) return reactor;
  auto v2 = std::make_shared<V2InferRequest>();
  RequestHeader header;
  std::vector<zmq::message_t> frames;
  std::string tag;
  Status status = CallTag(*context, config_.client_id_header, &tag);
  if (status.ok()) status = V2RequestFromProto(*request, v2.get());
  if (status.ok()) status = CheckV2ShmAllowed(*v2, config_.system_shared_memory, context->peer());
  if (status.ok()) status = ApplyDeadline(*context, v2.get());
  if (status.ok()) {
    status = ToRequestHeader(*v2, channels_[0]->request_limits(), &header, &frames);
  }
  if (!status.ok()) {
    if (call->Claim()) call->Finish(status);
    return reactor;
  }
  Submit(std::move(call), tag, std::move(header), std::move(frames),
         [v2, response](FarmReply& reply) {
           V2InferResponse v2_response;
           Status s = FromFarmReply(*v2, reply.header, std::move(reply.frames), &v2_response);
           if (s.ok()) V2ResponseToProto(v2_response, response);
           return s;
         });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
GrpcServer::Impl::ModelStreamInfer(grpc::CallbackServerContext* context) {
  // The stream's metadata came once, with its start: one tag (or one refusal) for every request.
  std::string tag;
  Status named = CallTag(*context, config_.client_id_header, &tag);
  auto stream = std::make_shared<GrpcStream>(
      [this] {
        return channels_[next_channel_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
      },
      stats_, context->peer(), GrpcStream::Client{std::move(tag), std::move(named)},
      [this](GrpcStream* done) {
        std::lock_guard<std::mutex> lock(mutex_);
        streams_.erase(done);
      },
      config_.system_shared_memory);
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping = stopping_;
    if (!stopping) streams_.emplace(stream.get(), stream);
  }
  stream->Start();
  if (stopping) stream->Close(ToGrpcStatus(Unavailable("the gRPC front end is shutting down")));
  return stream.get();
}

Status GrpcServer::Start(const FrontendConfig& config, std::vector<FarmChannel*> channels,
                         FrontendStats* stats, std::unique_ptr<GrpcServer>* out) {
  if (channels.empty()) return Internal("GrpcServer::Start needs at least one FarmChannel");
  auto impl = std::make_unique<Impl>(config, std::move(channels), stats);
  if (Status s = impl->Start(); !s.ok()) return s;
  out->reset(new GrpcServer(std::move(impl)));
  return Status::Ok();
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcServer::~GrpcServer() { Stop(); }
void GrpcServer::Stop() {
  if (impl_) impl_->Stop();
}
int GrpcServer::port() const { return impl_ ? impl_->port() : 0; }

}  // namespace torchfarm
