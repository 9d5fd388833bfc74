#include "supervisor/intake/client_shm_registry.h"

#include <unistd.h>

#include "common/log.h"
#include "common/random_hex.h"
#include "supervisor/intake/system_shm_object.h"
#include "supervisor/loop/resource_errors.h"

namespace torchfarm {

ClientShmRegistry::ClientShmRegistry(ClientShmConfig config, std::string name_prefix, int group)
    : config_(config),
      prefix_(std::move(name_prefix)),
      group_(group),
      system_owner_(::geteuid()),
      system_directory_(kShmDirectory) {}

void ClientShmRegistry::set_system_owner(uid_t owner, std::string directory) {
  system_owner_ = owner;
  system_directory_ = std::move(directory);
}

namespace {

std::string RegionQuoted(const std::string& name) {
  constexpr size_t kMaxShown = 100;
  return "'" + name.substr(0, kMaxShown) + (name.size() > kMaxShown ? "...'" : "'");
}

}  // namespace

Status ClientShmRegistry::RegisterSystem(const std::string& name, const std::string& key,
                                         uint64_t offset, uint64_t byte_size) {
  if (name.empty()) return InvalidArgument("region name: expected a non-empty name");
  if (system_.count(name)) {
    return InvalidArgument("shared memory region " + RegionQuoted(name) + " already in manager");
  }
  if (system_.size() >= kMaxSystemRegions) {
    return ResourceExhausted("register " + RegionQuoted(name) + ": " +
                             std::to_string(system_.size()) +
                             " system shared-memory regions are registered, the most there may "
                             "be; unregister one first");
  }
  std::unique_ptr<ipc::SharedRegion> region;
  if (Status s =
          OpenSystemShmObject(key, offset, byte_size, system_owner_, system_directory_, &region);
      !s.ok()) {
    return Status(s.code(), "register " + RegionQuoted(name) + ": " + s.message());
  }
  ShmBudget::Reservation reservation;
  if (Status s = ShmBudget::Reserve(budget_, byte_size,
                                    "system shared memory " + RegionQuoted(name), &reservation);
      !s.ok()) {
    return s;
  }
  system_[name] =
      SystemEntry{SystemRegionInfo{name, key, offset, byte_size},
                  std::shared_ptr<ipc::SharedRegion>(std::move(region)), std::move(reservation)};
  TF_LOG(kInfo) << "system shared memory registered" << Kv("name", name) << Kv("key", key)
                << Kv("offset", offset) << Kv("byte_size", byte_size);
  return Status::Ok();
}

Status ClientShmRegistry::UnregisterSystem(const std::string& name) {
  if (name.empty()) {
    system_.clear();
    return Status::Ok();
  }
  auto it = system_.find(name);
  if (it == system_.end()) {
    return NotFound("Unable to find shared memory region: " + RegionQuoted(name) +
                    " (it is not registered)");
  }
  system_.erase(it);
  TF_LOG(kInfo) << "system shared memory unregistered" << Kv("name", name);
  return Status::Ok();
}

Status ClientShmRegistry::SystemStatus(const std::string& name,
                                       std::vector<SystemRegionInfo>* out) const {
  out->clear();
  if (!name.empty()) {
    auto it = system_.find(name);
    if (it == system_.end()) {
      return NotFound("Unable to find system shared memory region: " + RegionQuoted(name));
    }
    out->push_back(it->second.info);
    return Status::Ok();
  }
  for (const auto& [region, entry] : system_) out->push_back(entry.info);
  return Status::Ok();
}

Status ClientShmRegistry::ResolveSystem(const std::string& name, uint64_t offset, uint64_t bytes,
                                        const std::string& where,
                                        std::shared_ptr<ipc::SharedRegion>* out) const {
  auto it = system_.find(name);
  if (it == system_.end()) {
    return NotFound(where + ": Unable to find shared memory region: " + RegionQuoted(name) +
                    " (register it first: POST /v2/systemsharedmemory/region/{name}/register)");
  }
  const uint64_t size = it->second.info.byte_size;
  if (offset > size || bytes > size - offset) {
    return InvalidArgument(where + ": Invalid offset + byte size for shared memory region: " +
                           RegionQuoted(name) + ": offset " + std::to_string(offset) + " + " +
                           std::to_string(bytes) + " bytes = " + std::to_string(offset + bytes) +
                           ", the region has " + std::to_string(size) + " bytes");
  }
  *out = it->second.region;
  return Status::Ok();
}

Status ClientShmRegistry::Create(uint64_t bytes, const std::string& client, TimePoint now,
                                 CreatedRegion* out) {
  if (!config_.enabled) {
    return InvalidArgument("shm_create: client shared memory is disabled (client_shm.enabled)");
  }
  if (bytes > config_.max_region_bytes) {
    return ResourceExhausted("shm_create: " + std::to_string(bytes) +
                             " bytes exceed the limit of " +
                             std::to_string(config_.max_region_bytes) +
                             " per region (client_shm.max_region_bytes)");
  }
  if (regions_.size() >= static_cast<size_t>(config_.max_regions)) {
    return ResourceExhausted("shm_create: " + std::to_string(regions_.size()) +
                             " regions are live, the limit is " +
                             std::to_string(config_.max_regions) +
                             " (client_shm.max_regions); release one first");
  }
  if (auto held = per_client_.find(client);
      held != per_client_.end() && held->second >= config_.max_regions_per_client) {
    return ResourceExhausted("shm_create: this client already holds " +
                             std::to_string(held->second) + " regions, the limit is " +
                             std::to_string(config_.max_regions_per_client) +
                             " (client_shm.max_regions_per_client); release one first");
  }
  if (bytes > config_.max_total_bytes - std::min(bytes_, config_.max_total_bytes)) {
    return ResourceExhausted("shm_create: " + std::to_string(bytes) + " more bytes would exceed " +
                             std::to_string(config_.max_total_bytes) + " over all regions (" +
                             std::to_string(bytes_) + " live; client_shm.max_total_bytes)");
  }
  ShmBudget::Reservation reservation;
  if (Status s = ShmBudget::Reserve(budget_, bytes, "shm_create", &reservation); !s.ok()) return s;
  std::string token, suffix;
  if (Status s = RandomHex(16, &token); !s.ok()) return s;
  if (Status s = RandomHex(4, &suffix); !s.ok()) return s;
  const std::string name = "/" + prefix_ + "c" + std::to_string(next_name_++) + "-" + suffix;
  std::unique_ptr<ipc::SharedRegion> region;
  const unsigned mode = group_ >= 0 ? 0660 : 0600;
  if (Status s = ipc::SharedRegion::Create(name, bytes, mode, group_, &region); !s.ok()) {
    // shm_open or ftruncate out of descriptors or /dev/shm space: this request fails, counted.
    ResourceErrors::Instance().Note("client shm create", s.message(), now);
    return Status(s.code(), "shm_create: " + s.message());
  }
  regions_[token] = Entry{std::shared_ptr<ipc::SharedRegion>(std::move(region)), now, client,
                          std::move(reservation)};
  ++per_client_[client];
  bytes_ += bytes;
  ++created_;
  TF_LOG(kDebug) << "client region created" << Kv("name", name) << Kv("bytes", bytes);
  *out = CreatedRegion{token, name, bytes};
  return Status::Ok();
}

Status ClientShmRegistry::Release(const std::string& token) {
  auto it = regions_.find(token);
  if (it == regions_.end()) {
    return NotFound("shm_release: no region with that token (already released, expired after " +
                    std::to_string(config_.idle_timeout_s) +
                    " s unused, or made by another supervisor)");
  }
  Erase(it);
  return Status::Ok();
}

Status ClientShmRegistry::Resolve(const std::string& token, uint64_t offset, uint64_t bytes,
                                  const std::string& where, TimePoint now,
                                  std::shared_ptr<ipc::SharedRegion>* out) {
  if (!config_.enabled) {
    return InvalidArgument(where + ": client shared memory is disabled (client_shm.enabled)");
  }
  auto it = regions_.find(token);
  if (it == regions_.end()) {
    return NotFound(where + ".region: no region with that token (released, expired after " +
                    std::to_string(config_.idle_timeout_s) +
                    " s unused, or made by another supervisor; create one with shm_create)");
  }
  const uint64_t size = it->second.region->size();
  if (offset > size || bytes > size - offset) {
    return InvalidArgument(where + ": bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset) + " + " + std::to_string(bytes) +
                           ") run past the end of the region (" + std::to_string(size) +
                           " bytes)");
  }
  it->second.last_used = now;
  *out = it->second.region;
  return Status::Ok();
}

int ClientShmRegistry::ExpireIdle(TimePoint now) {
  int expired = 0;
  const auto limit = std::chrono::seconds(config_.idle_timeout_s);
  for (auto it = regions_.begin(); it != regions_.end();) {
    auto next = std::next(it);
    if (now - it->second.last_used >= limit) {
      TF_LOG(kInfo) << "client region released after its idle timeout"
                    << Kv("name", it->second.region->name())
                    << Kv("idle_timeout_s", config_.idle_timeout_s);
      Erase(it);
      ++expired;
    }
    it = next;
  }
  expired_ += static_cast<uint64_t>(expired);
  return expired;
}

void ClientShmRegistry::ReleaseAll() {
  while (!regions_.empty()) Erase(regions_.begin());
  system_.clear();
}

void ClientShmRegistry::Erase(std::map<std::string, Entry>::iterator it) {
  // The name goes with the last reference: a request already accepted may still have a worker
  // open the region by name (the in-place path, docs/protocol.md).
  bytes_ -= it->second.region->size();
  if (auto held = per_client_.find(it->second.client); held != per_client_.end() && --held->second <= 0) {
    per_client_.erase(held);
  }
  regions_.erase(it);
}

}  // namespace torchfarm
