// The shared-memory layout of one worker's segment: a header, a request ring and a response ring
// of fixed-size slots. Plain data only; both the supervisor and the worker map it.
//
//   offset 0                      SegmentHeader (magic, layout version, geometry, 4 ring indices)
//   request_slots_offset          slot_count request slots  (supervisor produces, worker consumes)
//   response_slots_offset         slot_count response slots (worker produces, supervisor consumes)
//
// Each slot is `slot_bytes` long: a SlotHeader followed by the data area. Tensors live in the data
// area at 64-byte aligned offsets recorded in their TensorDesc; only offsets cross processes, never
// pointers. The rings are single-producer/single-consumer with monotonically increasing 64-bit
// indices (slot = index % slot_count): no interprocess mutex that a dying process could leave
// locked. A producer fills the slot at `head`, then stores head+1 with release order; the consumer
// loads head with acquire order, uses the slot at `tail`, then stores tail+1 with release order.
// Wake-ups travel separately through eventfd doorbells (ipc/doorbell.h). What a slot holds, and
// every write and read of it, belongs to ipc/slot_codec.h; the bounds below are tied together
// there with static_asserts.
//
// Increment kLayoutVersion whenever any struct in this file changes; the worker checks it against
// the segment and reports it in its hello.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/tensor_spec.h"  // kMaxRank

namespace torchfarm::ipc {

inline constexpr uint64_t kSegmentMagic = 0x4d52414648435254ull;  // "TRCHFARM" little-endian
inline constexpr uint32_t kLayoutVersion = 3;  // 3: PipelineReport in OK responses
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kTensorAlignment = 64;  // every tensor's offset in a slot's data area
inline constexpr int kMaxTensors = 16;          // inputs of a request or outputs of a response
inline constexpr size_t kSlotMessageBytes = 464;
// Client shared-memory regions (docs/protocol.md) one request slot may name, and the longest name.
inline constexpr int kMaxClientRegions = 4;
inline constexpr size_t kRegionNameBytes = 56;
// TensorDesc::location of a tensor in the slot's own data area; any other value v means "in
// client region v - 1 of the request's `regions`", with `offset` counted from that region's start.
inline constexpr uint8_t kInSlot = 0;

// One tensor inside a slot's data area or a client region. 88 bytes, 8-byte aligned.
struct TensorDesc {
  uint8_t dtype;     // torchfarm::DType code
  uint8_t rank;      // <= kMaxRank
  uint8_t location;  // kInSlot, or 1 + an index into the request's SlotHeader::regions
  uint8_t reserved[5];
  int64_t shape[kMaxRank];
  uint64_t offset;  // bytes from the start of the data area (a multiple of kTensorAlignment) or
                    // of the client region
  uint64_t nbytes;  // C-contiguous little-endian bytes
};
static_assert(sizeof(TensorDesc) == 88);
static_assert(std::is_trivially_copyable_v<TensorDesc>);

// A client region by its POSIX shared-memory name; the worker maps it on first use.
struct ClientRegionRef {
  char name[kRegionNameBytes];  // NUL-terminated, with the leading '/'
  uint64_t bytes;               // the region's size, as the supervisor mapped it
};
static_assert(sizeof(ClientRegionRef) == 64);

// Start of every slot. The data area begins right after it (its size is a multiple of 64).
//
// In place: a request that runs alone and uses client regions (docs/protocol.md, "Shared-memory
// tensors") may name them here, so the worker reads its inputs from and writes its outputs into
// the client's region without the supervisor copying them through the ring.
struct SlotHeader {
  uint64_t batch_id;      // set by the supervisor, echoed by the worker in the response
  uint32_t tensor_count;  // <= kMaxTensors
  int32_t status;         // torchfarm::StatusCode; requests: 0, or a refusal (slot_codec.h)
  uint64_t compute_us;    // responses: wall time of forward() plus output copy
  uint32_t region_count;  // requests: entries of `regions` in use (<= kMaxClientRegions)
  uint32_t output_region;  // requests: 0, outputs into the response slot; else 1 + region index
  uint64_t output_offset;  // requests with output_region: the range outputs are placed in
  uint64_t output_bytes;   //   (common/shm_reference.h PlaceOutputs)
  ClientRegionRef regions[kMaxClientRegions];
  TensorDesc tensors[kMaxTensors];
  char message[kSlotMessageBytes];  // with status != 0: NUL-terminated error text
};
static_assert(sizeof(SlotHeader) % kCacheLine == 0);
static_assert(std::is_trivially_copyable_v<SlotHeader>);

// What a worker's pipeline (worker/pipeline_stages.h) adds to an OK response, in the slot's
// `message` bytes (which carry text only when status != 0): the batch's time per stage and the
// rows whose item failed (a corrupt image fails only the request holding that row). Recognised by
// its magic; a response without it has no pipeline report.
inline constexpr uint32_t kPipelineReportMagic = 0x45504950;  // "PIPE" little-endian
inline constexpr int kMaxRowErrors = 4;
inline constexpr size_t kRowErrorTextBytes = 88;

struct RowError {
  uint32_t row;                   // of the batch, < its rows
  int32_t status;                 // torchfarm::StatusCode, not OK
  char text[kRowErrorTextBytes];  // NUL-terminated
};
static_assert(sizeof(RowError) == 96);

struct PipelineReport {
  uint32_t magic;            // kPipelineReportMagic
  uint32_t row_error_count;  // <= kMaxRowErrors
  int64_t decode_us;         // -1: the model has no such stage
  int64_t preprocess_us;
  int64_t postprocess_us;
  RowError row_errors[kMaxRowErrors];
};
static_assert(sizeof(PipelineReport) <= sizeof(SlotHeader::message),
              "the pipeline report lives in an OK response's message bytes");
static_assert(std::is_trivially_copyable_v<PipelineReport>);

// A ring index alone on its cache line so producer and consumer never share a line.
struct alignas(kCacheLine) RingIndex {
  std::atomic<uint64_t> value;
  char padding[kCacheLine - sizeof(std::atomic<uint64_t>)];
};
static_assert(sizeof(RingIndex) == kCacheLine);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "ring indices must be lock-free to be shared between processes");

struct SegmentHeader {
  uint64_t magic;           // kSegmentMagic
  uint32_t layout_version;  // kLayoutVersion
  uint32_t slot_count;      // slots per ring
  uint64_t slot_bytes;      // SlotHeader + data area, a multiple of kCacheLine
  uint64_t request_slots_offset;
  uint64_t response_slots_offset;
  uint64_t total_bytes;
  uint64_t reserved[2];
  RingIndex request_head;   // written by the supervisor
  RingIndex request_tail;   // written by the worker
  RingIndex response_head;  // written by the worker
  RingIndex response_tail;  // written by the supervisor
};
static_assert(sizeof(SegmentHeader) == 5 * kCacheLine);
static_assert(offsetof(SegmentHeader, request_head) == kCacheLine);

inline constexpr size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

inline uint8_t* SlotData(uint8_t* slot) { return slot + sizeof(SlotHeader); }
inline const uint8_t* SlotData(const uint8_t* slot) { return slot + sizeof(SlotHeader); }
inline SlotHeader* SlotHeaderOf(uint8_t* slot) { return reinterpret_cast<SlotHeader*>(slot); }
inline const SlotHeader* SlotHeaderOf(const uint8_t* slot) {
  return reinterpret_cast<const SlotHeader*>(slot);
}

}  // namespace torchfarm::ipc
