#include "supervisor/intake/client_quota.h"

#include <zmq.h>

#include <iterator>

namespace torchfarm {

bool ClientQuota::TryAcquire(const std::string& client) {
  auto it = held_.find(client);
  if (it != held_.end() && it->second >= max_per_client_) return false;
  if (it == held_.end()) {
    if (max_per_client_ <= 0) return false;
    held_.emplace(client, 1);
  } else {
    if (it->second == 0) --idle_;
    ++it->second;
  }
  return true;
}

void ClientQuota::Release(const std::string& client) {
  auto it = held_.find(client);
  if (it == held_.end() || it->second <= 0) return;
  if (--it->second > 0) return;
  if (++idle_ <= kIdleKept) return;
  // Past the bound: every idle entry goes, this one included, so clients that left (a reconnect
  // is a new routing id) do not hold the places for good. One pass every kIdleKept idle entries.
  for (auto entry = held_.begin(); entry != held_.end();) {
    entry = entry->second == 0 ? held_.erase(entry) : std::next(entry);
  }
  idle_ = 0;
}

int64_t ClientQuota::held(const std::string& client) const {
  auto it = held_.find(client);
  return it == held_.end() ? 0 : it->second;
}

std::string ClientKey(const zmq::message_t& identity, zmq::message_t& payload, bool per_key) {
  std::string key(static_cast<const char*>(identity.data()), identity.size());
  if (!per_key) return key;
  // One CURVE key is one client however many connections (routing ids) it opens.
  const char* user = zmq_msg_gets(payload.handle(), "User-Id");
  return user ? std::string(user) : key;
}

}  // namespace torchfarm
