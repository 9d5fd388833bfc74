// The body of the ring reader fuzzer: what a worker can write into its segment, fed to the
// supervisor's reader of it (WorkerSlot::CollectResponses with PinnedResponseRing, and
// ipc::ReadResponse per response as ResponseHandler does). Shared by the libFuzzer target
// (ring_reader_fuzzer.cc, `make fuzz`) and the regression replay (fuzz_regression_test.cc).
//
// A real WorkerSlot on the fake launcher (tests/supervisor/fake_worker.h): a real segment of 4
// slots of 4 KiB, no process (the fake pid answers kill() with ESRCH). The input is a program of
// one-byte ops, each followed by its operand bytes (missing bytes read as zero):
//   0 dispatch a batch of one [1, 2] float32 request (when a request slot is free)
//   1 serve the oldest request correctly (FakeWorker::ServeOne)
//   2 response_head  = u64          3 response_head += u8
//   4 request_tail   = u64          5 response_tail = u64 (the supervisor's own index, scribbled)
//   6 write u8 bytes at u16 offset into the header of response slot u8 (mod the ring)
//   7 collect (the supervisor's loop reads the ring)
// and one final collect. Invariants, each an abort: every slot handed to the reader lies inside
// the response slots; no more responses are read than batches were dispatched; once a violation
// was reported nothing more is read and the slot accepts no batch; every output ReadResponse
// accepts lies inside its slot's data area (read whole, so ASan sees it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchfarm::fuzz {

void RunRingReaderInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
