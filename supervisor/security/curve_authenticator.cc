#include "supervisor/security/curve_authenticator.h"

#include <zmq.h>

#include "common/curve_keys.h"
#include "common/log.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

namespace {

// ZAP request frames (RFC 27): version, request id, domain, address, identity, mechanism, then
// the mechanism's credentials (CURVE: the client's 32-byte public key).
constexpr size_t kZapRequestFrames = 7;

}  // namespace

Status CurveAuthenticator::Start(zmq::context_t& context, const CurveConfig& config) {
  if (!zmq_has("curve")) {
    return Unavailable("\"curve\" is configured but this libzmq was built without CURVE");
  }
  config_ = config;
  CurveKeyPair pair;
  if (Status s = ReadCurveSecretKeyFile(config_.secret_key_file, &pair); !s.ok()) return s;
  public_key_ = pair.public_key;
  secret_key_ = pair.secret_key;
  if (Status s = Reload(); !s.ok()) return s;
  socket_.emplace(context, zmq::socket_type::rep);
  socket_->set(zmq::sockopt::linger, 0);
  try {
    socket_->bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return Unavailable(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  TF_LOG(kInfo) << "CURVE on: clients must present an authorized key"
                << Kv("server_public_key", public_key_) << Kv("authorized_keys", authorized_.size())
                << Kv("authorized_clients_dir", config_.authorized_clients_dir);
  return Status::Ok();
}

Status CurveAuthenticator::Reload() {
  std::set<std::string> keys;
  std::vector<std::string> skipped;
  Status s = LoadAuthorizedKeys(config_.authorized_clients_dir, &keys, &skipped);
  if (!s.ok()) {
    if (socket_) {
      TF_LOG(kError) << "authorized keys not reloaded, keeping the previous set: " << s.message();
    }
    return s;
  }
  for (const auto& why : skipped) TF_LOG(kWarn) << "authorized key skipped: " << why;
  if (socket_) {
    TF_LOG(kInfo) << "authorized keys reloaded" << Kv("before", authorized_.size())
                  << Kv("after", keys.size());
  }
  authorized_ = std::move(keys);
  return Status::Ok();
}

void CurveAuthenticator::ConfigureServer(zmq::socket_t& socket, const std::string& domain) const {
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, secret_key_);
  socket.set(zmq::sockopt::zap_domain, domain);
}

void CurveAuthenticator::HandleRequests() {
  if (!socket_) return;
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(*socket_, &frames); ++n) {
    Answer(frames);
  }
}

void CurveAuthenticator::Answer(const std::vector<zmq::message_t>& request) {
  // A REP socket must answer every request it took, even a malformed one (libzmq sends them).
  std::string request_id = request.size() > 1 ? request[1].to_string() : "";
  std::string status = "400", text = "malformed ZAP request", user;
  if (request.size() >= kZapRequestFrames - 1 && request[0].to_string_view() == "1.0") {
    const std::string domain = request[2].to_string();
    const std::string address = request[3].to_string();
    if (request[5].to_string_view() == "NULL") {
      // Sockets without security in this context (the workers' control socket, an ipc admin
      // socket), should libzmq ask: a NULL peer can never reach a CURVE socket, whose handshake
      // fails on the mechanism before ZAP is consulted.
      status = "200";
      text = "OK";
    } else if (request.size() < kZapRequestFrames || request[5].to_string_view() != "CURVE" ||
               request[6].size() != 32) {
      text = "only CURVE clients are served";
    } else {
      char z85[41];
      zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
      if (authorized_.count(z85)) {
        status = "200";
        text = "OK";
        user = z85;
      } else {
        text = "client key not authorized";
        ++refused_;
        // A stranger can retry in a loop; log the first few refusals, then every power of two.
        if (refused_ <= 10 || (refused_ & (refused_ - 1)) == 0) {
          TF_LOG(kWarn) << "refused a CURVE client with an unknown key" << Kv("key", z85)
                        << Kv("address", address) << Kv("domain", domain)
                        << Kv("refused_total", refused_);
        }
      }
    }
  }
  socket_->send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  socket_->send(zmq::buffer(request_id), zmq::send_flags::sndmore);
  socket_->send(zmq::buffer(status), zmq::send_flags::sndmore);
  socket_->send(zmq::buffer(text), zmq::send_flags::sndmore);
  socket_->send(zmq::buffer(user), zmq::send_flags::sndmore);
  socket_->send(zmq::message_t(), zmq::send_flags::none);
}

}  // namespace torchfarm
