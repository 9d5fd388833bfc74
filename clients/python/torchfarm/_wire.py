"""Wire protocol v1 (docs/protocol.md): request frames out, reply frames in.

Shared by :class:`torchfarm.Client` and :class:`torchfarm.AsyncClient`; no sockets here.

A request is frame 0, a JSON header, followed by one frame per input tensor holding its raw
C-contiguous little-endian bytes. Input frames are memoryviews over the caller's (or a converted)
array, so ``send_multipart(..., copy=False)`` hands them to libzmq without copying.
"""

from __future__ import annotations

import json
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .errors import Internal, InvalidArgument, error_from_reply

PROTOCOL_VERSION = 1

# numpy dtype -> wire dtype name. bfloat16 is a wire dtype but numpy has none, so the Python
# client can neither send nor receive it.
_WIRE_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16",
    np.dtype(np.int64): "int64",
    np.dtype(np.int32): "int32",
    np.dtype(np.int16): "int16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.bool_): "bool",
}
_NUMPY_DTYPES = {name: dtype.newbyteorder("<") for dtype, name in _WIRE_NAMES.items()}


def _from_torch(tensor: Any) -> np.ndarray:
    """A torch tensor as a numpy array sharing its memory when it is already a CPU tensor."""
    if str(tensor.dtype) == "torch.bfloat16":
        raise InvalidArgument(
            "bfloat16 tensors are unsupported in the Python client (numpy has no bfloat16); "
            "convert with tensor.float() or use the C++ client"
        )
    return tensor.detach().cpu().contiguous().numpy()


def _is_torch_tensor(value: Any) -> bool:
    # Only a program that imported torch can pass a tensor, so never import it here.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def to_wire_array(value: Any, index: int) -> np.ndarray:
    """Any array-like (numpy array, torch tensor, nested lists, scalars) as a C-contiguous
    little-endian array of a wire dtype. No copy when `value` already is one."""
    if _is_torch_tensor(value):
        value = _from_torch(value)
    try:
        array = np.asarray(value)
    except Exception as e:  # numpy raises several types for ragged or odd input
        raise InvalidArgument(f"input {index}: not an array: {e}") from e
    wire = _WIRE_NAMES.get(array.dtype.newbyteorder("="))
    if wire is None:
        supported = ", ".join(_NUMPY_DTYPES)
        raise InvalidArgument(f"input {index}: dtype {array.dtype} is not sent by the Python "
                              f"client (supported: {supported})")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (never applied to 0-d: it would make them 1-d)
    return array


def encode_request(request_id: int, model: str, inputs: Sequence[Any],
                   timeout_ms: int = 0, priority: int = 0) -> List[Any]:
    """The frames of one request: the JSON header, then a memoryview per input."""
    arrays = [to_wire_array(value, i) for i, value in enumerate(inputs)]
    header = {
        "v": PROTOCOL_VERSION,
        "id": request_id,
        "model": model,
        "inputs": [{"dtype": _WIRE_NAMES[a.dtype.newbyteorder("=")], "shape": list(a.shape)}
                   for a in arrays],
    }
    if timeout_ms > 0:
        header["timeout_ms"] = int(timeout_ms)
    if priority:
        header["priority"] = int(priority)
    frames: List[Any] = [json.dumps(header).encode()]
    # reshape(-1) of a contiguous array is a view; uint8 view makes a plain byte buffer for libzmq.
    frames.extend(memoryview(a.reshape(-1).view(np.uint8)) for a in arrays)
    return frames


def reply_id(header_frame: Any) -> Tuple[Optional[Any], Optional[dict]]:
    """Parses a reply header frame; returns (id, header), or (None, None) when unreadable."""
    try:
        header = json.loads(bytes(header_frame))
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(header, dict):
        return None, None
    return header.get("id"), header


def decode_reply(header: dict, data_frames: Sequence[Any]) -> List[np.ndarray]:
    """Outputs of a reply, or raises the TorchfarmError of an error reply.

    Each output is a read-only numpy view over its received frame (no copy); call ``.copy()``
    on it to get a writable array.
    """
    status = header.get("status")
    if status == "error":
        raise error_from_reply(str(header.get("code", "INTERNAL")), str(header.get("message", "")))
    if status != "ok":
        raise Internal(f"malformed reply: status {status!r}")
    specs = header.get("outputs")
    if not isinstance(specs, list) or len(specs) != len(data_frames):
        raise Internal(f"malformed reply: {len(data_frames)} data frames for outputs {specs!r}")
    outputs = []
    for i, (spec, frame) in enumerate(zip(specs, data_frames)):
        try:
            dtype = _NUMPY_DTYPES[spec["dtype"]]
            shape = tuple(int(d) for d in spec["shape"])
        except (KeyError, TypeError, ValueError):
            raise Internal(f"malformed reply: output {i}: unreadable spec {spec!r} (bfloat16 "
                           "outputs are unsupported in the Python client)") from None
        buffer = getattr(frame, "buffer", frame)  # zmq.Frame when received with copy=False
        expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if len(buffer) != expected:
            raise Internal(f"malformed reply: output {i}: {len(buffer)} bytes for "
                           f"{spec['dtype']} {list(shape)} ({expected} expected)")
        outputs.append(np.frombuffer(buffer, dtype=dtype).reshape(shape))
    return outputs
