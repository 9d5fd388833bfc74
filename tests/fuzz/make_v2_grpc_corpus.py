"""Writes the v2 gRPC fuzzer's seeds (tests/fuzz/v2_grpc_corpus/, committed): serialized
ModelInferRequests as tritonclient builds them, with and without Triton's system shared memory
parameters, good and hostile, and text seeds for the extension's parsers (register bodies,
shared-memory parameter objects, peers). Run with .venv/bin/python (it needs tritonclient[grpc])
after changing them: .venv/bin/python tests/fuzz/make_v2_grpc_corpus.py
"""

from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

OUT = Path(__file__).resolve().parent / "v2_grpc_corpus"


def request(inputs, outputs=(), raw=True, model="identity"):
    r = pb.ModelInferRequest(model_name=model, id="seed")
    for name, array, shm in inputs:
        t = r.inputs.add(name=name, datatype="FP32", shape=list(array.shape))
        if shm:
            for key, value in shm.items():
                if isinstance(value, str):
                    t.parameters[key].string_param = value
                elif isinstance(value, float):
                    t.parameters[key].double_param = value
                elif value < 0:
                    t.parameters[key].int64_param = value
                else:
                    t.parameters[key].uint64_param = value
        elif raw:
            r.raw_input_contents.append(array.tobytes())
        else:
            t.contents.fp32_contents.extend(array.ravel().tolist())
    for name, shm in outputs:
        o = r.outputs.add(name=name)
        for key, value in (shm or {}).items():
            if isinstance(value, str):
                o.parameters[key].string_param = value
            else:
                o.parameters[key].int64_param = value
    return r.SerializeToString()


def main():
    OUT.mkdir(exist_ok=True)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    shm_in = {"shared_memory_region": "in", "shared_memory_byte_size": 24}
    shm_out = {"shared_memory_region": "out", "shared_memory_byte_size": 24,
               "shared_memory_offset": 64}
    seeds = {
        "raw_fp32": request([("INPUT__0", x, None)]),
        "typed_fp32": request([("INPUT__0", x, None)], raw=False),
        "shm_input": request([("INPUT__0", x, shm_in)]),
        "shm_input_output": request([("INPUT__0", x, shm_in)], [("OUTPUT__0", shm_out)]),
        "shm_mixed": request([("x", x, shm_in), ("y", x, None)], [("sum", shm_out), ("w", None)]),
        "shm_offset": request([("INPUT__0", x, {**shm_in, "shared_memory_offset": 8})]),
        "shm_no_byte_size": request([("INPUT__0", x, {"shared_memory_region": "in"})]),
        "shm_wrong_byte_size": request([("INPUT__0", x, {**shm_in,
                                                          "shared_memory_byte_size": 20})]),
        "shm_negative_offset": request([("INPUT__0", x, {**shm_in,
                                                          "shared_memory_offset": -8})]),
        "shm_double_size": request([("INPUT__0", x, {**shm_in,
                                                      "shared_memory_byte_size": 24.0})]),
        "shm_offset_only": request([("INPUT__0", x, {"shared_memory_offset": 8})]),
        "shm_output_classification": request(
            [("INPUT__0", x, None)], [("OUTPUT__0", {**shm_out, "classification": 2})]),
        "register_body": b'{"key": "/input_data", "offset": 0, "byte_size": 1024}',
        "register_body_path": b'{"key": "/../etc/passwd", "byte_size": 64}',
        "register_body_bad": b'{"key": 3, "byte_size": -1}',
        "params_good": b'{"shared_memory_region": "r", "shared_memory_byte_size": 16, '
                       b'"shared_memory_offset": 4}',
        "params_huge": b'{"shared_memory_region": "r", "shared_memory_byte_size": '
                       b'18446744073709551615}',
        "peer_v4": b"ipv4:127.0.0.1:5000",
        "peer_v6": b"ipv6:[::1]:5000",
        "peer_remote": b"ipv4:10.0.0.7:1",
    }
    for name, data in seeds.items():
        (OUT / name).write_bytes(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
