// A client of several torchfarm supervisors at once (docs/scale-out.md): the same Infer / Send /
// Receive calls as torchfarm::Client, with requests spread over the supervisors that answer.
//
// Owns: one ZeroMQ context (one I/O thread), one DEALER socket per endpoint, the EndpointPool that
// decides where requests go and which endpoint is presumed dead, a copy of every unanswered
// request's frames (to re-send it), and replies waiting to be returned. Not thread-safe: use one
// MultiClient per thread.
//
// Behaviour:
// - Spreading: each request goes to the live endpoint with the fewest outstanding requests,
//   round-robin among equals.
// - Ejection: an endpoint that owes a reply (requests outstanding, or a probe) and sends nothing
//   for `eject_after_ms` is ejected: its socket is closed (nothing queued for it is sent later) and
//   reopened, and its outstanding requests are re-sent to the other endpoints. While requests run
//   long, a busy endpoint quiet for `heartbeat_ms` is sent a probe (protocol.md, "Liveness
//   probe"), which the supervisor answers at once, so slow models do not get it ejected.
// - Probing: an ejected endpoint is probed after `probe_backoff_ms`, then at doubling intervals
//   up to `max_probe_backoff_ms`; any answer puts it back into rotation.
// - Refusals: RESOURCE_EXHAUSTED or UNAVAILABLE makes the request go to another live endpoint that
//   has not refused it; the refusing endpoint is picked last for `refusal_cooldown_ms`. The error
//   is returned once every live endpoint refused the request.
// - Delivery is at-least-once: a request whose endpoint died after running it runs again
//   elsewhere (inference is idempotent). Replies are deduplicated by request id: each request
//   gets exactly one result, and late or duplicate replies are dropped.
// - `io_timeout_ms` bounds a request's whole life, re-sends included: when no result came by then,
//   DEADLINE_EXCEEDED "no reply within N ms (endpoints tried: ...)". While every endpoint is
//   ejected, requests wait (unsent) for a probe to succeed until that deadline.
// - Inputs are copied once (a re-send may happen after Infer's caller would have freed them).
// - No shared memory: a region belongs to one supervisor, so inputs in a region and output_shm
//   are refused (INVALID_ARGUMENT); use torchfarm::Client for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "torchfarm/client.h"
#include "torchfarm/endpoint_pool.h"

namespace torchfarm {

struct MultiClientOptions {
  int io_timeout_ms = 30000;        // a request's whole budget, re-sends included
  int heartbeat_ms = 500;           // probe a busy endpoint quiet this long
  int eject_after_ms = 2000;        // eject an endpoint silent this long while owing a reply
  int probe_backoff_ms = 250;       // first probe of an ejected endpoint
  int max_probe_backoff_ms = 4000;  // probe interval cap
  int refusal_cooldown_ms = 1000;   // a refusing endpoint is picked last this long
  ClientSecurity security;          // CURVE for every endpoint (client.h); empty: none
};

// One endpoint's counters, for monitoring and tests.
struct EndpointStatus {
  std::string endpoint;
  bool live = true;
  int outstanding = 0;
  uint64_t sent = 0;       // requests sent there (first sends and re-sends)
  uint64_t results = 0;    // replies there that answered a request (ok or error)
  uint64_t ejections = 0;  // times it was taken out of rotation
  uint64_t readmissions = 0;
};

class MultiClient {
 public:
  // `endpoints`: "tcp://10.0.0.5:5555", … (at least one). A malformed endpoint or an empty list
  // does not throw: connect_status() reports it and every call returns it.
  explicit MultiClient(const std::vector<std::string>& endpoints, MultiClientOptions options = {});
  ~MultiClient();
  MultiClient(const MultiClient&) = delete;
  MultiClient& operator=(const MultiClient&) = delete;

  const Status& connect_status() const { return connect_status_; }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  const MultiClientOptions& options() const { return options_; }

  // As Client::Infer; replies to pipelined Sends arriving meanwhile are kept for Receive.
  Status Infer(const std::string& model, const std::vector<TensorView>& inputs, InferResult* result,
               const InferOptions& options = {});
  // As Client::Send (copies the inputs; `*id` is this client's id for the request).
  Status Send(const std::string& model, const std::vector<TensorView>& inputs,
              const InferOptions& options, uint64_t* id);
  // As Client::Receive: the next result of a Send, in arrival order, waiting up to `timeout_ms`
  // (< 0: until the request's own io timeout). DEADLINE_EXCEEDED with `*id` set is that request's
  // final answer; with `*id` == 0 only this wait ran out.
  Status Receive(InferResult* result, uint64_t* id, int timeout_ms);
  // Sent requests whose results have not been returned by Receive yet.
  size_t outstanding() const;

  std::vector<EndpointStatus> endpoint_status() const;

 private:
  struct PendingRequest;
  struct ReadyReply {
    uint64_t id = 0;
    Status status;
    InferResult result;
  };

  // One turn of the event loop: waits up to `until` for a message, handles what arrived, then
  // what time decided (ejections, probes, expiries), then sends what waits for an endpoint.
  void Pump(TimePoint until);
  void HandleMessage(int endpoint, std::vector<std::string>& frames, TimePoint now);
  void Complete(uint64_t id, ReadyReply reply);
  void Dispatch(uint64_t id, PendingRequest& request, TimePoint now);
  void DispatchWaiting(TimePoint now);
  void HandleEjection(int endpoint, TimePoint now);
  void SendProbe(int endpoint, TimePoint now);
  void ExpireRequests(TimePoint now);
  bool SendFrames(int endpoint, const std::vector<std::shared_ptr<const std::string>>& frames);
  Status OpenSocket(int endpoint);
  TimePoint NextWake(TimePoint until) const;
  bool TakeReady(uint64_t id, ReadyReply* out);

  std::vector<std::string> endpoints_;
  MultiClientOptions options_;
  Status connect_status_;
  EndpointPool pool_;
  std::vector<EndpointStatus> status_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<PendingRequest>> pending_;  // no final answer yet
  std::map<uint64_t, int> probes_;                               // probe id -> endpoint
  std::deque<ReadyReply> ready_;                                 // final answers to Send
  std::map<uint64_t, ReadyReply> infer_ready_;                   // final answers to Infer
  // Sockets close before the context terminates (reverse declaration order).
  std::unique_ptr<zmq::context_t> context_;
  std::vector<std::unique_ptr<zmq::socket_t>> sockets_;
};

}  // namespace torchfarm
