#include "ipc/worker_segment.h"

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <new>

namespace torchfarm::ipc {

namespace bip = boost::interprocess;

WorkerSegment::WorkerSegment(std::string name, bool owner,
                             std::unique_ptr<bip::mapped_region> region)
    : name_(std::move(name)), owner_(owner), region_(std::move(region)) {
  base_ = static_cast<uint8_t*>(region_->get_address());
  size_ = region_->get_size();
}

WorkerSegment::~WorkerSegment() {
  region_.reset();
  if (owner_) bip::shared_memory_object::remove(name_.c_str());
}

bool WorkerSegment::Remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

void WorkerSegment::InitRings() {
  auto* header = reinterpret_cast<SegmentHeader*>(base_);
  request_ring_ = SpscRing(base_ + header->request_slots_offset, header->slot_count,
                           header->slot_bytes, &header->request_head, &header->request_tail);
  response_ring_ = SpscRing(base_ + header->response_slots_offset, header->slot_count,
                            header->slot_bytes, &header->response_head, &header->response_tail);
}

namespace {
uint64_t SlotBytes(uint64_t data_bytes) {
  return AlignUp(sizeof(SlotHeader) + AlignUp(data_bytes, kCacheLine), kCacheLine);
}
uint64_t RequestSlotsOffset() { return AlignUp(sizeof(SegmentHeader), 4096); }
}  // namespace

uint64_t WorkerSegment::TotalBytes(uint32_t slot_count, uint64_t data_bytes) {
  return RequestSlotsOffset() + 2 * uint64_t{slot_count} * SlotBytes(data_bytes);
}

Status WorkerSegment::Create(const std::string& name, uint32_t slot_count, uint64_t data_bytes,
                             std::unique_ptr<WorkerSegment>* out) {
  if (slot_count == 0) return InvalidArgument("segment needs at least one slot");
  uint64_t slot_bytes = SlotBytes(data_bytes);
  uint64_t requests = RequestSlotsOffset();
  uint64_t responses = requests + uint64_t{slot_count} * slot_bytes;
  uint64_t total = TotalBytes(slot_count, data_bytes);
  try {
    bip::shared_memory_object::remove(name.c_str());
    bip::permissions owner_only(0600);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, owner_only);
    shm.truncate(static_cast<bip::offset_t>(total));
    auto region = std::make_unique<bip::mapped_region>(shm, bip::read_write);
    std::unique_ptr<WorkerSegment> segment(new WorkerSegment(name, true, std::move(region)));
    // The pages are zero-filled by ftruncate; construct the header in place all the same so the
    // atomics begin their lifetime properly.
    auto* header = new (segment->base_) SegmentHeader{};
    header->magic = kSegmentMagic;
    header->layout_version = kLayoutVersion;
    header->slot_count = slot_count;
    header->slot_bytes = slot_bytes;
    header->request_slots_offset = requests;
    header->response_slots_offset = responses;
    header->total_bytes = total;
    header->request_head.value.store(0);
    header->request_tail.value.store(0);
    header->response_head.value.store(0);
    header->response_tail.value.store(0);
    segment->InitRings();
    *out = std::move(segment);
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return Internal("cannot create shared-memory segment '" + name + "' of " +
                    std::to_string(total) + " bytes: " + e.what());
  }
}

Status WorkerSegment::Open(const std::string& name, std::unique_ptr<WorkerSegment>* out) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    auto region = std::make_unique<bip::mapped_region>(shm, bip::read_write);
    std::unique_ptr<WorkerSegment> segment(new WorkerSegment(name, false, std::move(region)));
    if (segment->size_ < sizeof(SegmentHeader)) {
      return Internal("segment '" + name + "' is too small for its header");
    }
    const auto* header = reinterpret_cast<const SegmentHeader*>(segment->base_);
    if (header->magic != kSegmentMagic) {
      return Internal("segment '" + name + "' has a bad magic number");
    }
    if (header->layout_version != kLayoutVersion) {
      return Internal("segment '" + name + "' has layout version " +
                      std::to_string(header->layout_version) + ", this binary expects " +
                      std::to_string(kLayoutVersion));
    }
    if (header->total_bytes > segment->size_ || header->slot_count == 0 ||
        header->slot_bytes <= sizeof(SlotHeader)) {
      return Internal("segment '" + name + "' has an inconsistent geometry");
    }
    segment->InitRings();
    *out = std::move(segment);
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    return Internal("cannot open shared-memory segment '" + name + "': " + e.what());
  }
}

}  // namespace torchfarm::ipc
