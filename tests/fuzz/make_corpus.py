#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/: the seed inputs of the protocol fuzzer, taken from the requests of
tests/common/protocol_test.cc and tests/supervisor/job_intake_test.cc. Format (see
protocol_fuzz_input.h): frames joined by "\\n--\\n", the JSON header first, data frames after.
Rerun after changing the seeds; the files are committed."""
import hashlib
import json
import os

SEP = b"\n--\n"
HERE = os.path.dirname(os.path.abspath(__file__))


def req(header, *sizes):
    head = header if isinstance(header, (bytes, str)) else json.dumps(header)
    head = head.encode() if isinstance(head, str) else head
    return SEP.join([head] + [b"\x01" * n for n in sizes])


def spec(dtype, shape):
    return {"dtype": dtype, "shape": shape}


valid = {"v": 1, "id": 42, "model": "pair", "inputs": [spec("float32", [3, 2]), spec("int64", [3])]}
seeds = [
    req(valid, 24, 24),
    req({**valid, "timeout_ms": 50, "priority": 3}, 24, 24),
    # The client's own deadline (stop 47): microseconds since the epoch, a past one, a hostile one.
    req({**valid, "deadline_unix_us": 1733550000123456}, 24, 24),
    req({**valid, "deadline_unix_us": 1, "timeout_ms": 50}, 24, 24),
    req({**valid, "deadline_unix_us": -1}, 24, 24),
    req({**valid, "deadline_unix_us": 123456789012345678901234567890}, 24, 24),
    req({"v": 1, "id": "a", "model": "mlp", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 1, "model": "mlp", "version": "1", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 1, "model": "mlp", "version": "v2.0-rc_1", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [4, 4])]}, 64),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [0, 4])]}, 0),
    req({"v": 1, "model": "any", "inputs": [spec("uint8", [2, 3, 4])]}, 24),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 4])]}),
    req({"v": 1, "model": "mlp", "inputs": [spec("float64", [1, 4])]}, 32),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 5])]}, 20),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [2000, 4])]}, 32000),
    req({"v": 1, "model": "nope", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 2, "model": "mlp", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 1, "id": "req-7", "model": "mlp", "inputs": [spec("float128", [1, 4])]}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 4])], "surprise": True}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, -4])]}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 2, 3, 4, 5, 6, 7, 8, 9])]}, 16),
    req({"v": 1, "model": "mlp", "inputs": []}),
    req({"v": 1, "model": "", "inputs": [spec("float32", [1, 4])]}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 4])] * 17}, *([16] * 17)),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 4])], "timeout_ms": -1}, 16),
    req({"v": 1, "model": "mlp", "inputs": [spec("float32", [1, 4])], "priority": 1001}, 16),
    req({"v": 1, "model": "mlp", "inputs": [{"dtype": "float32", "shape": [1, 4], "x": 1}]}, 16),
    req({"v": 1, "model": "pair", "inputs": [spec("float32", [3, 2]), spec("int64", [])]}, 24, 8),
    req({"v": 1, "model": "pair", "inputs": [spec("float32", [4611686018427387904, 2]),
                                             spec("int64", [3])]}, 24, 24),
    req({"v": 1, "model": "mlp", "id": [[[[{"a": None}]]]], "inputs": [spec("float32", [1, 4])]}, 16),
    req("{\"v\": 1, \"model\": "),
    req(""),
    req("not json", 16),
    req("[1, 2, 3]"),
    req(b"{\"v\":1,\"model\":\"\xff\xfe\",\"inputs\":[{\"dtype\":\"float32\",\"shape\":[1,4]}]}", 16),
    req(b"\xef\xbb\xbf{\"v\":1}"),
    # Named inputs (the fuzz models keep the default names INPUT__k): reversed, unknown, repeated,
    # missing, mixed with unnamed, not a valid name.
    req({"v": 1, "model": "pair", "inputs": [{**spec("int64", [3]), "name": "INPUT__1"},
                                             {**spec("float32", [3, 2]), "name": "INPUT__0"}]}, 24, 24),
    req({"v": 1, "model": "pair", "inputs": [{**spec("float32", [3, 2]), "name": "INPUT__0"},
                                             {**spec("int64", [3]), "name": "x"}]}, 24, 24),
    req({"v": 1, "model": "pair", "inputs": [{**spec("float32", [3, 2]), "name": "INPUT__0"},
                                             {**spec("float32", [3, 2]), "name": "INPUT__0"}]}, 24, 24),
    req({"v": 1, "model": "pair", "inputs": [{**spec("float32", [3, 2]), "name": "INPUT__0"}]}, 24),
    req({"v": 1, "model": "pair", "inputs": [{**spec("float32", [3, 2]), "name": "INPUT__0"},
                                             spec("int64", [3])]}, 24, 24),
    req({"v": 1, "model": "mlp", "inputs": [{**spec("float32", [1, 4]), "name": "a b"}]}, 16),
]

corpus = os.path.join(HERE, "corpus")
os.makedirs(corpus, exist_ok=True)
for seed in seeds:
    name = hashlib.sha1(seed).hexdigest()
    with open(os.path.join(corpus, name), "wb") as f:
        f.write(seed)
print(f"wrote {len(seeds)} seeds to {corpus}")
