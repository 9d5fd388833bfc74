#!/usr/bin/env python3
"""Writes the ring reader fuzzer's seeds (tests/fuzz/ring_reader_corpus/): op programs in the
format of tests/fuzz/ring_reader_fuzz_input.h. Rerun after changing the format."""
import os
import struct

DISPATCH, SERVE, HEAD, HEAD_ADD, REQUEST_TAIL, RESPONSE_TAIL, HEADER_BYTES, COLLECT = range(8)


def u64(op, value):
    return bytes([op]) + struct.pack("<Q", value)


def header_bytes(slot, offset, data):
    return bytes([HEADER_BYTES, slot]) + struct.pack("<H", offset) + bytes([len(data)]) + data


SEEDS = {
    "served-in-order": bytes([DISPATCH, SERVE, COLLECT] * 3 + [DISPATCH, DISPATCH, SERVE, SERVE,
                                                               COLLECT]),
    "head-2-pow-40": bytes([DISPATCH]) + u64(HEAD, 1 << 40) + bytes([COLLECT]),
    "response-for-nothing": bytes([DISPATCH, SERVE, HEAD_ADD, 1, COLLECT]),
    "head-goes-back": bytes([DISPATCH, SERVE, COLLECT]) + u64(HEAD, 0) + bytes([COLLECT]),
    "request-tail-past-head": bytes([DISPATCH]) + u64(REQUEST_TAIL, 5) + bytes([COLLECT]),
    "supervisor-tail-scribbled": bytes([DISPATCH, SERVE, COLLECT]) + u64(RESPONSE_TAIL, 1234) +
    bytes([DISPATCH, SERVE, COLLECT] * 5),
    "wrong-batch-id": bytes([DISPATCH, SERVE]) + header_bytes(0, 0, b"\x99") + bytes([COLLECT]),
    "tensor-count-200": bytes([DISPATCH, SERVE]) + header_bytes(0, 8, b"\xc8") + bytes([COLLECT]),
    "ring-wraps": bytes([DISPATCH, DISPATCH, DISPATCH, DISPATCH, SERVE, SERVE, SERVE, SERVE,
                         COLLECT] * 3),
}

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ring_reader_corpus")
os.makedirs(here, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
