#!/usr/bin/env python3
"""Writes tests/fuzz/slot_codec_corpus/: the seed inputs of the slot codec fuzzer, one ring slot
each (ipc/shm_layout.h SlotHeader, then the data area; see slot_codec_fuzz_input.h). Valid request
and response slots of every kind the codec writes, so the fuzzer starts deep in the decoders.
Rerun after changing the seeds or the layout; the files are committed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER_BYTES = 2176  # sizeof(SlotHeader), layout version 2
REGION_NAME_BYTES = 56
MAX_REGIONS = 4
MAX_TENSORS = 16
MAX_RANK = 8
MESSAGE_BYTES = 464
FLOAT32, INT64, UINT8 = 1, 5, 9
SIZES = {FLOAT32: 4, INT64: 8, UINT8: 1}


def tensor(dtype, shape, offset, location=0):
    nbytes = SIZES[dtype]
    for d in shape:
        nbytes *= d
    dims = list(shape) + [0] * (MAX_RANK - len(shape))
    return struct.pack("<BBB5x8qQQ", dtype, len(shape), location, *dims, offset, nbytes)


def slot(batch_id=1, tensors=(), status=0, compute_us=0, regions=(), output_region=0,
         output_offset=0, output_bytes=0, message=b"", region_count=None, data=b""):
    head = struct.pack("<QIiQIIQQ", batch_id, len(tensors), status, compute_us,
                       len(regions) if region_count is None else region_count, output_region,
                       output_offset, output_bytes)
    table = b"".join(struct.pack(f"<{REGION_NAME_BYTES}sQ", name, size) for name, size in regions)
    table += b"\0" * ((REGION_NAME_BYTES + 8) * (MAX_REGIONS - len(regions)))
    descs = b"".join(tensors) + b"\0" * (88 * (MAX_TENSORS - len(tensors)))
    out = head + table + descs + message.ljust(MESSAGE_BYTES, b"\0")
    assert len(out) == HEADER_BYTES, len(out)
    return out + data


REGION = (b"/torchfarm-1-r0", 4096)
seeds = {
    "empty-header": slot(batch_id=0),
    "request-two-inputs": slot(7, [tensor(FLOAT32, [3, 4], 0), tensor(INT64, [3], 64)],
                               data=bytes(range(256))),
    "request-in-place": slot(8, [tensor(UINT8, [2, 8], 128, location=1), tensor(UINT8, [16], 0)],
                             regions=[REGION, (b"/torchfarm-1-r1", 512)], output_region=2,
                             output_offset=64, output_bytes=256, data=b"\x05" * 64),
    "request-refusal": slot(9, status=3, message=b"the batch's inputs need more; raise slot_bytes"),
    "response-batch-of-4": slot(10, [tensor(FLOAT32, [4, 2], 0), tensor(UINT8, [4], 64)],
                                compute_us=120, region_count=4, data=b"\x01" * 128),
    "response-in-place": slot(11, [tensor(UINT8, [3], 128, location=1),
                                   tensor(FLOAT32, [2], 192, location=1)],
                              output_region=1, output_offset=128, output_bytes=1024),
    "response-error": slot(12, status=6, compute_us=5, message=b"batch failed: boom"),
    "response-scalar": slot(13, [tensor(INT64, [], 0)], data=b"\x02" * 64),
}

out_dir = os.path.join(HERE, "slot_codec_corpus")
os.makedirs(out_dir, exist_ok=True)
for name, body in seeds.items():
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(body)
print(f"wrote {len(seeds)} seeds to {out_dir}")
