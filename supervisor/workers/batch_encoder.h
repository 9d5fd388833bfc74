// The supervisor's side of the slot codec (ipc/slot_codec.h): turns a batch of PendingRequests
// into the request slot its worker reads (the requests' inputs concatenated along dim 0, or one
// request handed over in place in its client regions), and says what the response to it must look
// like. Holds no state (a caller may lend it a scratch description); runs on the supervisor's
// loop thread.
#pragma once

#include <cstdint>

#include "ipc/slot_codec.h"

namespace torchfarm {

struct InflightBatch;

// How EncodeBatch handed the batch over (InflightBatch::in_place, outputs_in_place).
struct BatchEncoding {
  bool in_place = false;
  bool outputs_in_place = false;
};

// Writes `batch` into request slot `slot`, whose data area holds `data_capacity` bytes. With
// `shm_in_place`, a batch of one request that uses client regions names them instead of copying
// their bytes, when the slot's region table holds them all. A batch the slot cannot hold (intake
// and batching keep that from happening) becomes a refusal the worker answers with the error,
// logged here: the slot can always be published. `scratch`, when given, is the caller's batch
// description reused from one call to the next (its vectors keep their memory: no allocation a
// batch, issue 36); null: a fresh one.
BatchEncoding EncodeBatch(const InflightBatch& batch, bool shm_in_place, uint8_t* slot,
                          uint64_t data_capacity, ipc::RequestBatch* scratch = nullptr);

// What the response to `batch` must satisfy (ipc::ReadResponse), in a segment whose slots hold
// `data_capacity` data bytes.
ipc::ResponseExpectation ExpectedResponse(const InflightBatch& batch, uint64_t data_capacity);

}  // namespace torchfarm
