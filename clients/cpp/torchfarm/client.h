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
//
// Shared memory (same host only; docs/protocol.md, "Shared-memory tensors"): CreateShm makes a
// region in the supervisor and maps it here (shm_region.h); an input made by ShmRegion::Input or
// Write travels as region + offset with no data frame, and InferOptions::output_shm makes the
// supervisor write the outputs into a range of a region instead of sending data frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol.h"
#include "common/shm_reference.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "torchfarm/shm_region.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace torchfarm {

// A non-owning input: `data` must hold `nbytes` == ByteSize(spec) C-contiguous little-endian bytes
// (a bytes spec, [N]: N items each prefixed by its 4-byte little-endian length,
// common/bytes_items.h), sent as a data frame. Or, when `shm.used()`, the bytes lie in a client
// shared-memory region at `shm.offset` (ShmRegion::Input / Write make such views): the request
// carries region and offset, no data frame, and `data` is not read.
struct TensorView {
  TensorView() = default;
  TensorView(TensorSpec spec_in, const void* data_in, size_t nbytes_in)
      : spec(std::move(spec_in)), data(data_in), nbytes(nbytes_in) {}
  TensorView(TensorSpec spec_in, ShmRef shm_in)
      : spec(std::move(spec_in)), shm(std::move(shm_in)) {}

  TensorSpec spec;
  const void* data = nullptr;
  size_t nbytes = 0;
  ShmRef shm;  // region token and offset (shm.bytes is unused for inputs)
  // The model's input this is (docs/protocol.md, "Named tensors"): name every input of a request
  // or none; named inputs may come in any order. Empty: the input's position decides.
  std::string name;
};

// An owning output. `name`: the model's name for it (config "outputs"), else OUTPUT__k.
struct Tensor {
  TensorSpec spec;
  std::string data;
  std::string name{};
};

struct InferOptions {
  InferOptions() = default;
  InferOptions(int64_t timeout_ms_in, int priority_in)
      : timeout_ms(timeout_ms_in), priority(priority_in) {}

  int64_t timeout_ms = 0;  // server-side deadline; 0: none. Keep it below the Client's io timeout.
  int priority = 0;        // 0 is the highest
  // When used (ShmRegion::Output): the supervisor writes every output into this range of a region
  // and the reply has no data frames. Client only; MultiClient refuses it.
  ShmRef output_shm;
};

struct InferResult {
  ReplyHeader header;  // filled whenever a reply for the request arrived (ok or error)
  // Outputs sent as data frames. Empty for a request with output_shm: then header.outputs holds
  // each output's spec and header.output_shm[k].offset where output k lies in the region (an
  // absolute offset inside the request's range, checked by the client); read it from
  // ShmRegion::data() + offset before the range is written again.
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

  // shm_create: the supervisor makes a zero-filled region of `bytes` bytes, which is mapped here
  // read-write. Errors: the supervisor's (RESOURCE_EXHAUSTED past its client_shm limits,
  // INVALID_ARGUMENT when client_shm is disabled); INVALID_ARGUMENT "cannot open shared-memory
  // region ..." when this process cannot map it (another host, another user: the region is
  // released again). The region's Release() goes through this Client, which must outlive it.
  Status CreateShm(uint64_t bytes, std::unique_ptr<ShmRegion>* out);
  // shm_release of a token (ShmRegion::Release calls it). NOT_FOUND for an unknown token.
  Status ReleaseShm(const std::string& token);

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

  // What a blocking call waits for: the reply to request `id` (0: to any outstanding Send),
  // an inference reply whose outputs must lie in `output_shm` when it is used, or (`command`) the
  // reply to shm_create / shm_release, which lists no outputs.
  struct Awaited {
    uint64_t id = 0;
    ShmRef output_shm;
    bool command = false;
  };

  Status Connect();
  Status SendRequest(const std::string& model, const std::vector<TensorView>& inputs,
                     const InferOptions& options, bool zero_copy, uint64_t* id);
  // Sends a header-only command (`header` gets "v" and a fresh "id") and waits for its reply;
  // `reply->raw` is the reply's header object.
  Status SendCommand(nlohmann::json header, ReplyHeader* reply);
  // Receives until the reply `awaited` names arrives.
  Status AwaitReply(const Awaited& awaited, int timeout_ms, ReadyReply* out);
  // After a timed-out Infer whose frames libzmq still holds: drop them with the socket.
  void ResetSocketIfFramesQueued();

  std::string endpoint_;
  ClientSecurity security_;
  int io_timeout_ms_;
  Status connect_status_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, ShmRef> outstanding_;  // sent by Send, no reply seen yet -> its output_shm
  std::deque<ReadyReply> ready_;  // replies to Send that arrived during Infer or a command
  // Declaration order is destruction order in reverse: the socket closes, then the context
  // terminates (releasing every queued frame), then the tracker those frames point to goes.
  std::unique_ptr<FrameReleaseTracker> release_tracker_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace torchfarm
