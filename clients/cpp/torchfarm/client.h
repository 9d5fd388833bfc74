// The C++ client of a torchfarm supervisor: sends inference requests over wire protocol v1
// (common/protocol.h, docs/protocol.md) and reads the replies. No LibTorch.
//
// Owns: one ZeroMQ context (one I/O thread) and one DEALER socket connected to the supervisor's
// ROUTER endpoint, the 64-bit request-id counter, the ids of pipelined requests still awaiting a
// reply, and replies that arrived while Infer waited for its own. Each Client has its own
// context, so Clients share nothing and a forked child never touches its parent's sockets.
//
// Not thread-safe: use one Client per thread.
//
// Replies are matched to requests by the header "id". A reply whose id is neither the one Infer
// waits for nor an outstanding Send is stale (its request timed out earlier) and is dropped, so a
// late reply is never mistaken for the next request's.
//
// Inputs: Infer sends them zero-copy (the caller's buffers stay alive for the whole blocking
// call; if Infer times out while its frames are still queued, the socket is closed and reopened
// so no buffer is read after Infer returns; outstanding Send requests are lost then). Send
// returns before its frames are transmitted, so it copies the inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/status.h"
#include "common/tensor_spec.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace torchfarm {

// A non-owning input: `data` must hold `nbytes` == ByteSize(spec) C-contiguous little-endian bytes.
struct TensorView {
  TensorSpec spec;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// An owning output.
struct Tensor {
  TensorSpec spec;
  std::string data;
};

struct InferOptions {
  int64_t timeout_ms = 0;  // server-side deadline; 0: none. Keep it below the Client's io timeout.
  int priority = 0;        // 0 is the highest
};

struct InferResult {
  ReplyHeader header;  // filled whenever a reply for the request arrived (ok or error)
  std::vector<Tensor> outputs;
};

// CURVE for a job socket that requires it (docs/security.md): the server's public key and this
// client's own pair, all Z85 (40 characters). Empty server_public_key: no CURVE.
struct ClientSecurity {
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;

  bool enabled() const { return !server_public_key.empty(); }
  // Reads the server's public key file (SERVER.key) and this client's secret key file
  // (NAME.key_secret, mode 0600; its public key is derived), as `torchfarm keygen` writes them.
  static Status FromFiles(const std::string& server_public_key_file,
                          const std::string& client_secret_key_file, ClientSecurity* out);
};

class Client {
 public:
  // `endpoint`: "tcp://127.0.0.1:5555", "ipc:///tmp/x.sock". `io_timeout_ms` bounds each wait of
  // Infer for its reply. A malformed endpoint does not throw: connect_status() reports it and
  // every call returns it.
  explicit Client(const std::string& endpoint, int io_timeout_ms = 30000);
  // The same over CURVE. Invalid keys do not throw: connect_status() reports them. A server that
  // does not know this client's key never answers: calls end with DEADLINE_EXCEEDED.
  Client(const std::string& endpoint, const ClientSecurity& security, int io_timeout_ms = 30000);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Status& connect_status() const { return connect_status_; }
  const std::string& endpoint() const { return endpoint_; }
  int io_timeout_ms() const { return io_timeout_ms_; }

  // Blocking call. OK only for an ok reply. A server error reply returns that error's code and
  // message (result->header still filled). No reply within io_timeout_ms: DEADLINE_EXCEEDED
  // "no reply from <endpoint> within N ms". Outputs that do not match the reply header (frame
  // count, byte size): INTERNAL "malformed reply: ...".
  Status Infer(const std::string& model, const std::vector<TensorView>& inputs, InferResult* result,
               const InferOptions& options = {});

  // Pipelined use: Send returns at once with the id it assigned (sent as the header "id").
  Status Send(const std::string& model, const std::vector<TensorView>& inputs,
              const InferOptions& options, uint64_t* id);
  // Waits up to `timeout_ms` (< 0: forever) for the reply to any outstanding Send, in arrival
  // order. `*id` is the request the returned status and result belong to (0 when none: timeout,
  // nothing outstanding). Statuses as for Infer.
  Status Receive(InferResult* result, uint64_t* id, int timeout_ms);
  // Sent requests whose replies have not been returned by Receive yet.
  size_t outstanding() const { return outstanding_.size() + ready_.size(); }

  // Raw access for tools and tests (e.g. malformed requests). SendRaw sends `frames` as one
  // multipart message; ReceiveRaw returns the frames of the next message that arrives, bypassing
  // id matching. Do not mix with Send/Receive on one Client.
  Status SendRaw(const std::vector<std::string>& frames);
  Status ReceiveRaw(std::vector<std::string>* frames, int timeout_ms);

  // Counts the zero-copy input frames libzmq still holds; defined in client.cc.
  struct FrameReleaseTracker;

 private:
  struct ReadyReply {
    uint64_t id = 0;
    Status status;
    InferResult result;
  };

  Status Connect();
  Status SendRequest(const std::string& model, const std::vector<TensorView>& inputs,
                     const InferOptions& options, bool zero_copy, uint64_t* id);
  // Receives until the reply for `infer_id` (or, when 0, for any outstanding Send) arrives.
  Status AwaitReply(uint64_t infer_id, int timeout_ms, ReadyReply* out);
  // After a timed-out Infer whose frames libzmq still holds: drop them with the socket.
  void ResetSocketIfFramesQueued();

  std::string endpoint_;
  ClientSecurity security_;
  int io_timeout_ms_;
  Status connect_status_;
  uint64_t next_id_ = 1;
  std::set<uint64_t> outstanding_;  // sent by Send, no reply seen yet
  std::deque<ReadyReply> ready_;    // replies to Send that arrived during Infer
  // Declaration order is destruction order in reverse: the socket closes, then the context
  // terminates (releasing every queued frame), then the tracker those frames point to goes.
  std::unique_ptr<FrameReleaseTracker> release_tracker_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace torchfarm
