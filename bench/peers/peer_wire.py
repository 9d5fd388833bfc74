"""The bytes on the wire of the peer benchmark (issue 31): one owner for every server's request
body and for decoding its answer, so the harness, the servers' adapters and the tests agree.

Each server gets its natural inference request for a batch-1 float32 input:
    torchfarm, triton   KServe v2 /v2/models/{m}/infer with the binary tensor extension
                        (JSON header + raw little-endian float32, Inference-Header-Content-Length)
    torchserve          /predictions/{m}, the raw float32 bytes (the handler knows the shape)
    rayserve            /{m}, the raw float32 bytes
    litserve            /predict on the model's own port, JSON {"data": base64 of the float32
                        bytes} (LitServe's default decoder takes JSON or forms only)
and answers in kind: v2 binary output, raw float32 bytes, or JSON {"data": base64}.
"""
from __future__ import annotations

import base64
import json

import numpy as np

SERVERS = ("torchfarm", "torchserve", "triton", "rayserve", "litserve")
V2_INPUT = "INPUT__0"
V2_OUTPUT = "OUTPUT__0"


class Request:
    """What the load generator sends: path, body, Content-Type and extra headers."""

    def __init__(self, path: str, body: bytes, content_type: str, headers: list[str]):
        self.path, self.body, self.content_type, self.headers = path, body, content_type, headers


def _float32_bytes(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x, dtype="<f4").tobytes()


def v2_binary_request(model: str, x: np.ndarray) -> Request:
    raw = _float32_bytes(x)
    header = {"inputs": [{"name": V2_INPUT, "datatype": "FP32", "shape": list(x.shape),
                          "parameters": {"binary_data_size": len(raw)}}],
              "outputs": [{"name": V2_OUTPUT, "parameters": {"binary_data": True}}]}
    text = json.dumps(header, separators=(",", ":")).encode()
    return Request(f"/v2/models/{model}/infer", text + raw, "application/octet-stream",
                   [f"Inference-Header-Content-Length: {len(text)}"])


def request_for(server: str, model: str, x: np.ndarray) -> Request:
    if server in ("torchfarm", "triton"):
        return v2_binary_request(model, x)
    if server == "torchserve":
        return Request(f"/predictions/{model}", _float32_bytes(x), "application/octet-stream", [])
    if server == "rayserve":
        return Request(f"/{model}", _float32_bytes(x), "application/octet-stream", [])
    if server == "litserve":
        body = json.dumps({"data": base64.b64encode(_float32_bytes(x)).decode()}).encode()
        return Request("/predict", body, "application/json", [])
    raise ValueError(f"server: expected one of {', '.join(SERVERS)}, got '{server}'")


def decode_v2_binary(body: bytes) -> np.ndarray:
    """The first output of a v2 answer, binary (after the JSON header) or JSON `data`."""
    text = body.decode("latin-1")
    header, end = json.JSONDecoder().raw_decode(text)
    if "outputs" not in header or not header["outputs"]:
        raise ValueError(f"v2 answer: expected 'outputs', got {text[:200]!r}")
    out = header["outputs"][0]
    shape = out["shape"]
    size = out.get("parameters", {}).get("binary_data_size")
    if size is None:
        return np.asarray(out["data"], dtype=np.float32).reshape(shape)
    raw = body[end:end + size]
    if len(raw) != size:
        raise ValueError(f"v2 answer: expected {size} binary bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype="<f4").reshape(shape)


def decode_response(server: str, body: bytes, out_shape: list[int]) -> np.ndarray:
    """The answer's float32 output, shaped [1] + out_shape; ValueError names what is wrong."""
    if server in ("torchfarm", "triton"):
        y = decode_v2_binary(body)
    elif server in ("torchserve", "rayserve"):
        y = np.frombuffer(body, dtype="<f4")
    elif server == "litserve":
        y = np.frombuffer(base64.b64decode(json.loads(body)["data"]), dtype="<f4")
    else:
        raise ValueError(f"server: expected one of {', '.join(SERVERS)}, got '{server}'")
    want = int(np.prod(out_shape))
    if y.size != want:
        raise ValueError(f"{server} answer: expected {want} float32 values, got {y.size}")
    return y.reshape([1] + list(out_shape))


def tensor_from_bytes(raw: bytes, in_shape: list[int]) -> np.ndarray:
    """A peer adapter's view of one raw request: float32 [1] + in_shape, or ValueError."""
    want = int(np.prod(in_shape)) * 4
    if len(raw) != want:
        raise ValueError(f"expected {want} bytes (float32 {in_shape}), got {len(raw)}")
    return np.frombuffer(raw, dtype="<f4").reshape([1] + list(in_shape))
