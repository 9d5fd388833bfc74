// The farm's JSON configuration (documented key by key in README.md, "Configuration").
//
// Owns: parsing and validation. Every error names the JSON path, what was expected and what was
// received; unknown keys are errors. Relative model paths resolve against the config file's
// folder. No process state here: "count": "auto" is resolved by the supervisor, which knows the
// cores it may use.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/client_weights.h"
#include "common/pipeline_config.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

struct InstanceConfig {
  std::string device = "cpu";  // "cpu" or "cuda:N"
  int count = 1;
  bool count_auto = false;     // "count": "auto": fill the cores the supervisor may use
  // Warm standby workers of this group: started, loaded and warmed up, but sent no batches until
  // a serving worker of the group dies (supervisor/workers/spare_policy.h). Not counted in `count`.
  // 0..64.
  int spares = 0;
  int threads = 1;             // intra-op threads of each worker
  std::vector<int> cores;      // optional CPU pinning of each worker of this group
  std::string fallback = "cpu";  // on a GPU that keeps failing: "cpu" or "none"
  int gpu_failures_before_fallback = 1;
  // GPU instances (docs/gpu.md). precision also applies on the CPU (bf16 is useful there).
  std::string precision = "fp32";  // "fp32", "fp16" or "bf16"
  int streams = 1;                 // CUDA streams: batches in flight on the device at once
  bool cudnn_benchmark = false;
  bool pin_memory = true;          // cudaHostRegister the ring segment
  // After answering, the worker may poll its ring up to this long before it sleeps on the
  // doorbell: a request arriving meanwhile skips a wake-up. Adaptive (worker/adaptive_spin.h):
  // only while recent gaps between requests are shorter than this and the poll is not taking a
  // core others need; an idle farm sleeps. 0: never poll.
  int idle_spin_us = 300;
  bool is_gpu() const { return device.rfind("cuda", 0) == 0; }
};

// Model "rollout": how a reload replaces the workers of a changed model, in the manner of a
// Kubernetes Deployment's rolling update (supervisor/models/rollout_policy.h). Each 0..64, not both
// 0.
struct RolloutConfig {
  int max_surge = 1;        // replacements started, and ready, before an old worker is retired
  int max_unavailable = 0;  // ready workers a rollout may take away (> 0: replace in place when
                            // memory cannot hold a surge)
  bool operator==(const RolloutConfig& other) const {
    return max_surge == other.max_surge && max_unavailable == other.max_unavailable;
  }
};

struct ModelConfig {
  std::string name;
  // One entry per loaded version (common/model_versions.h): "versions", a "model_repository"
  // folder, or "1" for an entry that lists none. (name, version) is unique in FarmConfig::models.
  std::string version = "1";
  std::string path;  // absolute after parsing
  // How the worker loads `path` (worker/model_runner.h): "auto" (a .pt2 file is an AOTInductor
  // package, anything else TorchScript), "torchscript" or "aoti".
  std::string format = "auto";
  // How the worker prepares a TorchScript module once it is loaded and converted to its
  // precision (worker/model_runner.h, docs/models.md "Optimizing a TorchScript model"): "none",
  // "freeze" (torch.jit.freeze) or "inference" (torch.jit.optimize_for_inference). AOTInductor
  // packages are compiled already and take "none" only.
  std::string optimize = "none";
  std::vector<TensorSpec> inputs;
  // One per input after parsing: its config "name", else INPUT__k (common/tensor_names.h). A
  // ModelConfig built in code may leave it short; input_name() fills the defaults.
  std::vector<std::string> input_names;
  // Config "outputs": what the model returns (-1 for a variable dimension), with names (else
  // OUTPUT__k). Empty when the config declares none; the supervisor then learns them
  // (supervisor/dispatch/model_metadata.h). Not checked against what the model returns.
  std::vector<TensorSpec> outputs;
  std::vector<std::string> output_names;
  std::vector<InstanceConfig> instances;
  // Scheduling.
  int64_t max_batch_size = 1;        // rows along dim 0 per batch; 1 disables merging
  int64_t max_queue_delay_us = 0;    // how long the oldest request may wait for company
  std::vector<int64_t> preferred_batch_sizes;
  int64_t max_queue_size = 1024;     // queued requests beyond which new ones are refused
  // A request queued this long is answered UNAVAILABLE (its client's timeout_ms, when shorter,
  // answers DEADLINE_EXCEEDED first); it waits this long for a restarting worker. 0: forever.
  int64_t max_queue_wait_ms = 30'000;
  // Latency objective (docs/scheduling.md): every request must be answered within this many ms
  // of its arrival (its own timeout_ms, when shorter, rules). The farm refuses at once, with
  // DEADLINE_EXCEEDED, a request that its measured batch cost says cannot make it, sheds a queued
  // one when a worker frees too late for it, and sizes batches so their requests finish in time.
  // 0: off (requests wait up to max_queue_wait_ms as before).
  int64_t latency_slo_ms = 0;
  int max_inflight_per_worker = 2;   // batches a worker may hold in its ring
  int priority_levels = 1;
  // The level a KServe v2 request without "priority" (or with 0, or one past priority_levels)
  // runs at, in Triton's numbering: 1 is the highest (the farm's level 0) .. priority_levels.
  // ZeroMQ requests keep their own meaning (docs/protocol.md). docs/kserve-v2.md, "Priority".
  int default_priority_level = 1;
  // Within a priority level, each client (ZeroMQ routing id or CURVE key; the HTTP/gRPC peer) has
  // its own share of the queue, served in turn weighted by rows
  // (supervisor/dispatch/model_queue.h). False: one FIFO per level, as before.
  bool fair_queueing = true;
  // Config "client_weights" (common/client_weights.h): each client's share of its level is
  // weighted (rows / weight); a request's "client_weight" may lower its own, never raise it.
  ClientWeights client_weights;
  // Shared-memory geometry of each worker of this model.
  uint64_t slot_bytes = 4 << 20;     // tensor bytes one ring slot holds (request or response)
  int ring_slots = 4;                // slots per ring; >= max_inflight_per_worker
  // A batch running longer than this gets its worker killed and treated as a crash; 0: never.
  int64_t hang_timeout_ms = 60'000;
  // Batches each worker runs (zero-filled) after loading and before it reports ready; one spec per
  // input. Written as batch sizes (trailing dims from `inputs`) or as shape lists.
  std::vector<std::vector<TensorSpec>> warmup;
  RolloutConfig rollout;
  // Decode / pre- / post-processing stages in the worker (common/pipeline_config.h); none when
  // the config has no "pipeline".
  PipelineConfig pipeline;

  // Input k's name: input_names[k], or INPUT__k beyond them.
  std::string input_name(size_t k) const;
  // Output k's name in replies and metadata: output_names[k], or OUTPUT__k beyond them (also for
  // outputs a model returns beyond those its config declares).
  std::string output_name(size_t k) const;
};

// Top-level "gpu": how GPU workers share their devices (docs/gpu.md).
struct GpuConfig {
  // NVIDIA MPS: "off" (time-slicing), "auto" (use or start a daemon, else time-slicing, said in
  // the log and stats), "required" (start-up fails without MPS).
  std::string mps = "off";
  int active_thread_percentage = 0;  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for workers; 0: unset
  std::string mps_control = "nvidia-cuda-mps-control";  // looked up on PATH unless absolute
};

// "client_shm": shared-memory regions the supervisor creates for same-host clients
// (docs/protocol.md, "Shared-memory tensors").
struct ClientShmConfig {
  bool enabled = true;
  uint64_t max_region_bytes = uint64_t{1} << 30;
  uint64_t max_total_bytes = uint64_t{4} << 30;  // over all live regions
  int max_regions = 64;
  int max_regions_per_client = 16;  // per client identity (ROUTER routing id, or CURVE key)
  int64_t idle_timeout_s = 600;  // a region no request named this long is released
  // A request that runs alone is read from and written to its regions by the worker itself,
  // instead of the supervisor copying through the ring (docs/protocol.md).
  bool in_place = true;
};

// Restart backoff and limits (supervisor/workers/restart_policy.h).
struct RestartConfig {
  int64_t initial_backoff_ms = 100;  // doubled after each failure, plus up to 25% jitter
  int64_t max_backoff_ms = 5'000;
  // Start failures (exits before ready) beyond this many within window_ms mark the slot failed;
  // kills and crashes after ready never do (supervisor/workers/restart_policy.h).
  int max_restarts = 5;
  int64_t window_ms = 60'000;
  int64_t healthy_after_ms = 10'000;  // a worker ready this long resets the backoff
  int64_t failed_retry_ms = 300'000;  // a failed slot is launched again after this cool-down
};

// CURVE on the job socket (and on a loopback TCP admin socket); docs/security.md.
struct CurveConfig {
  std::string secret_key_file;         // the server's Z85 secret key (`torchfarm keygen`), 0600
  std::string authorized_clients_dir;  // one file per admitted client public key; SIGHUP rereads
  bool enabled() const { return !secret_key_file.empty(); }
};

// Top-level "limits": what one client or one request may cost the supervisor.
inline constexpr uint64_t kDefaultMaxItemBytes = 16 << 20;

struct LimitsConfig {
  RequestLimits request;                // header, frames, rank, tensor, request and item bytes
  int64_t max_queued_per_client = 256;  // queued + running requests of one client identity
  // Replies a ZeroMQ client has not taken off the job socket yet (its connection's pipe), by
  // count and by bytes: past either, its new requests are refused
  // (supervisor/dispatch/reply_backlog.h).
  int64_t max_unread_replies_per_client = 256;
  int64_t max_unread_reply_bytes_per_client = int64_t{64} << 20;
  // Shared memory the supervisor creates: worker segments and client_shm regions together. A
  // worker launch beyond it backs off and retries; shm_create beyond it is RESOURCE_EXHAUSTED.
  // 0: the size of /dev/shm (supervisor/intake/shm_budget.h).
  uint64_t max_shm_bytes = 0;
};

// TLS of the HTTP and gRPC front ends: PEM files (relative paths resolve against the config).
struct TlsConfig {
  std::string cert_file;  // certificate chain
  std::string key_file;   // private key
  bool enabled() const { return !cert_file.empty(); }
};

// "http_endpoint", "grpc_endpoint" and "frontend": the Open Inference Protocol (KServe v2) front
// ends (docs/kserve-v2.md). Both endpoints are off by default; "HOST:PORT", port 0 picks a free
// one (the log and stats say which). Like the job socket, a non-loopback host needs "tls" or
// "insecure": true.
struct FrontendConfig {
  std::string http_endpoint;
  std::string grpc_endpoint;
  int threads = 1;                       // front-end threads (FarmChannels), 1..64
  int max_connections = 1024;            // open HTTP connections; more are closed at accept
  int64_t idle_timeout_ms = 60'000;      // a keep-alive connection with no request this long closes
  int64_t request_timeout_ms = 30'000;   // a request's header and body must arrive within this
  uint64_t max_header_bytes = 16 << 10;  // HTTP request line + headers
  uint64_t max_body_bytes = 64 << 20;    // HTTP body, gRPC message
  // HTTP request bodies held at once over all connections (from their header until the answer is
  // written); a request beyond it is refused RESOURCE_EXHAUSTED (429). >= max_body_bytes.
  uint64_t max_inflight_body_bytes = uint64_t{1} << 30;
  TlsConfig tls;
  // GET /dashboard and its status JSON (GET /v2/torchfarm/stats) on http_endpoint
  // (docs/operations.md "Dashboard"); false: both answer 404.
  bool dashboard = true;
  // The v2 model repository extension's load and unload (docs/kserve-v2.md): off by default, as
  // Triton's model control mode "none"; the index is always served.
  bool model_control = false;
  // The v2 logging extension's changes (POST /v2/logging, gRPC LogSettings with settings): off by
  // default; reading the settings is always served.
  bool log_control = false;
  // Triton's system shared memory extension (docs/kserve-v2.md, "System shared memory"): off by
  // default; on, loopback clients (127.0.0.0/8, ::1, unix sockets) may register POSIX shared-memory
  // objects of the supervisor's user and name them in inference requests.
  bool system_shared_memory = false;
  // The HTTP header (and gRPC metadata key) whose value names a v2 request's client: its client
  // key for limits.max_queued_per_client, client_weights and fair queueing becomes that value,
  // the same key as a ZeroMQ client with that routing id (docs/kserve-v2.md, "Client identity").
  // Lowercase (the config may spell it in any case); empty: off, each connection is a client.
  // Only for a gateway in front that sets it and strips what clients send: it is as
  // unauthenticated as a ZeroMQ routing id without CURVE.
  std::string client_id_header;
  bool enabled() const { return !http_endpoint.empty() || !grpc_endpoint.empty(); }
};

// frontend.client_id_header: an HTTP header name (RFC 9110 token) of 1..this many characters.
inline constexpr size_t kMaxClientIdHeaderChars = 64;

// drain_timeout_ms (and the supervisor's --drain-timeout-ms): 0..one day.
inline constexpr int64_t kMaxDrainTimeoutMs = 86'400'000;
// max_connections: 1..this (Linux's default fs.nr_open caps a process at 1,048,576 descriptors).
inline constexpr int64_t kMaxJobConnections = 1'000'000;

struct FarmConfig {
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string admin_endpoint;  // default: ipc://<run_dir>/admin.sock
  std::string run_dir = "/tmp/torchfarm";
  int heartbeat_ms = 1000;
  std::string worker_binary;   // default: torchfarm-worker next to the supervisor binary
  // How workers start: "zygote" forks them from a pre-started worker process that has loaded
  // LibTorch already (supervisor/workers/zygote.h; falls back to exec while it is down), "exec"
  // runs the worker binary for each one.
  std::string worker_launch = "zygote";
  std::string metrics_endpoint;  // Prometheus HOST:PORT (/metrics); empty: off
  int max_retries = 2;         // times a request is re-run after the worker running it died
  int64_t drain_timeout_ms = 30'000;  // SIGTERM: how long queued and running jobs may take
  // Connections the job socket serves at once; more are closed as they arrive (supervisor/
  // connection_monitor.h). 0: derived from the descriptor limit (DefaultMaxConnections).
  int max_connections = 0;
  RestartConfig restart;
  CurveConfig curve;
  bool insecure = false;       // allow a non-loopback endpoint without CURVE (warned at start)
  std::string ipc_group;       // ipc job socket: chown to this group and chmod 0660 after bind
  LimitsConfig limits;
  ClientShmConfig client_shm;
  GpuConfig gpu;
  FrontendConfig frontend;
  // One entry per (model, loaded version): the "models" entries, then those of the
  // "model_repository" folder (common/model_versions.h), each model's versions ascending.
  std::vector<ModelConfig> models;
  std::string model_repository;  // absolute; empty: none
  // Watch mode: every this many seconds the supervisor stats the config file and each served
  // model file and reloads when one changed (size or mtime). 0 = off.
  int model_repository_poll_s = 0;
  std::string source_path;     // the file this came from, for reloads and messages
};

// Parses a config object; `base_dir` resolves relative paths.
Status ParseConfig(const nlohmann::json& j, const std::string& base_dir, FarmConfig* out);
// Parses one "models" entry as the config file's entries are parsed (`load` with a model entry
// of its own): one ModelConfig per version its version_policy loads ("1" for an entry without
// versions). `where` prefixes errors ("load.config"), `base_dir` resolves relative paths.
Status ParseModelConfig(const nlohmann::json& j, const std::string& where,
                        const std::string& base_dir, std::vector<ModelConfig>* out);
// "model_repository": each DIR/NAME folder's config.json is a model entry without "path" (and
// without "versions"; "name", if given, must be NAME); its VERSION/model.pt files are the
// versions. One ModelConfig per version each entry's version_policy loads.
Status ParseModelRepository(const std::string& dir, const std::string& base_dir,
                            std::vector<ModelConfig>* out);
// Reads and parses a file; errors name the file.
Status LoadConfigFile(const std::string& path, FarmConfig* out);

// True for ipc:// and inproc:// endpoints and for tcp:// on 127.0.0.0/8, [::1] or localhost:
// endpoints another host cannot reach. Every other endpoint (tcp://*, tcp://0.0.0.0, an interface
// name, ws://, pgm://...) counts as reachable from the network.
bool IsLocalEndpoint(const std::string& endpoint);
// "HOST:PORT" of a front end: splits it (HOST may be "[::1]"); errors name `where`.
Status SplitHostPort(const std::string& text, const std::string& where, std::string* host,
                     int* port);

// The warm-up batches as the worker's --warmup argument takes them: a JSON array of arrays of
// {"dtype", "shape"}; and back.
std::string WarmupToJson(const std::vector<std::vector<TensorSpec>>& warmup);
Status WarmupFromJson(const std::string& text, std::vector<std::vector<TensorSpec>>* out);

// The dry runs a worker makes at load to learn what a model returns, so its metadata lists the
// outputs at ready (docs/kserve-v2.md): for a model whose config declares `inputs` but no
// `outputs`, no `warmup` (which reports them already) and no `pipeline` (its stages change what
// the model sees), one batch of 1 row with every other variable dim at kProbeDimSmall and, when
// there are such dims (or a variable dim 0 in a model with max_batch_size 1, whose rows the
// metadata cannot mark -1 otherwise), a second of 2 rows at kProbeDimLarge (output dims that
// differ between the two are variable, -1).
// Empty otherwise. In the --warmup JSON form (WarmupToJson).
constexpr int64_t kProbeDimSmall = 8;
constexpr int64_t kProbeDimLarge = 16;
std::vector<std::vector<TensorSpec>> OutputProbeBatches(const ModelConfig& model);

// Total worker count after "auto" resolution with `available_cores`.
int ResolveInstanceCount(const InstanceConfig& instance, int available_cores);

}  // namespace torchfarm
