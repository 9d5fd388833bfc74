// The control channel between the supervisor and its workers: one ZeroMQ ROUTER bound by the
// supervisor on ipc://<run_dir>/control-<supervisor pid>.sock, one DEALER per worker whose routing
// id is "w<worker id>.<generation>". Every message is a single frame of UTF-8 JSON with a "type".
//
// worker -> supervisor
//   hello      {"type":"hello","worker":3,"generation":0,"pid":1234,"layout_version":1,
//               "device":"cpu"}                                     first thing after connect
//   ready      {"type":"ready","load_ms":12.5,"warmup_ms":3.1,"threads":1,"device":"cpu",
//               "precision":"fp32","outputs":[{"dtype":"float32","shape":[4,10]}]}
//                                                                   model loaded, warmed up.
//              "outputs" (optional, ReadyOutputsJson): what the first warm-up batch returned, as
//              the replies would carry it (reduced precision answers float32); absent without a
//              warm-up. The supervisor learns the model's outputs from it (model_metadata.h).
//   heartbeat  {"type":"heartbeat","batches":10,"rows":40,"errors":0,"busy":false,
//               "stage_us":{"h2d":120,"compute":9000,"d2h":80},
//               "device":{"name":"NVIDIA H200","streams":2,"pinned":true,"mps_attached":true,
//                         "memory_allocated":123,"memory_reserved":456}}
//                                           every heartbeat_ms; counters and stage sums monotone
//   error      {"type":"error","fatal":true,"kind":"model|device|internal","message":"…"}
//                                                              fatal: the worker exits right after
// supervisor -> worker
//   ack        {"type":"ack"}     answers every heartbeat; a worker that hears nothing for
//                                  kLivenessHeartbeats intervals assumes its supervisor is gone
//   stop       {"type":"stop"}    finish the batches already in the ring, then exit 0
//
// Tensor data never travels here; it goes through the shared-memory rings (ipc/shm_layout.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm::ipc {

inline constexpr const char* kMsgHello = "hello";
inline constexpr const char* kMsgReady = "ready";
inline constexpr const char* kMsgHeartbeat = "heartbeat";
inline constexpr const char* kMsgError = "error";
inline constexpr const char* kMsgAck = "ack";
inline constexpr const char* kMsgStop = "stop";

// Heartbeats a peer may miss before the other side gives up on it.
inline constexpr int kLivenessHeartbeats = 3;

// Worker exit codes with meaning, so the supervisor can tell a bad model from a crash.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadArguments = 2;
inline constexpr int kExitModelLoad = 3;
inline constexpr int kExitSegment = 4;
inline constexpr int kExitSupervisorLost = 5;
// The accelerator is unusable (CUDA unavailable, or a sticky CUDA error poisoned the context).
// The supervisor counts these per slot and falls back to CPU (gpu_failures_before_fallback).
inline constexpr int kExitDeviceFailure = 6;

// Everything a worker needs, passed on its command line by the supervisor.
struct WorkerLaunchArgs {
  int worker_id = 0;
  int generation = 0;
  std::string model_name;
  std::string model_path;
  // worker/model_runner.h: "auto" (by the path: .pt2 is an AOTInductor package), "torchscript",
  // "aoti"; on the command line only when not "auto".
  std::string model_format = "auto";
  // "none", "freeze" or "inference" (common/config.h, ModelConfig::optimize); on the command
  // line only when not "none".
  std::string model_optimize = "none";
  std::string device = "cpu";
  int threads = 1;
  std::vector<int> cores;  // empty: no pinning
  std::string segment;     // shared-memory name
  int request_doorbell_fd = -1;
  int response_doorbell_fd = -1;
  std::string control_endpoint;
  int heartbeat_ms = 1000;
  std::string log_level = "info";
  // GPU and precision settings of the instance group (common/config.h, InstanceConfig).
  std::string precision = "fp32";
  int streams = 1;
  bool cudnn_benchmark = false;
  bool pin_memory = true;
  int idle_spin_us = 0;
  std::string warmup;  // JSON (common/config.h, WarmupToJson); empty: no warm-up
  // Dry runs that learn the outputs when nothing else reports them (common/config.h,
  // OutputProbeBatches; the --warmup JSON form); a failed one only leaves them unreported.
  std::string probe;
  std::string pipeline;  // JSON (common/pipeline_config.h, PipelineToJson); empty: no stages

  std::vector<std::string> ToArgv(const std::string& worker_binary) const;
  // Parses argv as written by ToArgv; on error returns InvalidArgument with CLI11's message.
  static Status Parse(int argc, char** argv, WorkerLaunchArgs* out);
  std::string RoutingId() const;
};

std::string WorkerRoutingId(int worker_id, int generation);

// The "outputs" field of a ready message, and back: false when the message has none or an
// unreadable one (a worker without warm-up, an older worker).
nlohmann::json ReadyOutputsJson(const std::vector<TensorSpec>& outputs);
bool ReadyOutputsFromMessage(const nlohmann::json& message, std::vector<TensorSpec>* out);

}  // namespace torchfarm::ipc
