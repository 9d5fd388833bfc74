"""Wire protocol v1 (docs/protocol.md): request frames out, reply frames in.

Shared by :class:`torchfarm.Client` and :class:`torchfarm.AsyncClient`; no sockets here.

A request is frame 0, a JSON header, followed by one frame per input tensor holding its raw
C-contiguous little-endian bytes. Input frames are memoryviews over the caller's (or a converted)
array, so ``send_multipart(..., copy=False)`` hands them to libzmq without copying. An input
given as a :class:`ShmTensor` has no frame: its header entry names the region and offset instead,
and ``output_shm`` sends the outputs to a region (protocol.md, "Shared-memory tensors"). An
input given as byte strings (``[jpeg_bytes, ...]``) is a "bytes" input: one frame of
length-prefixed items (protocol.md, "Bytes inputs"), decoded by the model's pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._dtypes import NUMPY_DTYPES, to_wire_array, wire_name
from .errors import Internal, InvalidArgument, error_from_reply
from .shm import ShmOutput, ShmRegion, ShmTensor

PROTOCOL_VERSION = 1


_BYTE_STRINGS = (bytes, bytearray, memoryview)


def is_bytes_input(value: Any) -> bool:
    """True for an input of dtype "bytes": one byte string (an encoded image), or a non-empty
    list or tuple of them (one item per row)."""
    if isinstance(value, _BYTE_STRINGS):
        return True
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(item, _BYTE_STRINGS) for item in value))


def encode_bytes_items(items: Sequence[Any]) -> bytes:
    """Items as the "bytes" dtype carries them (docs/protocol.md, "Bytes inputs"; Triton's BYTES
    layout): each a 4-byte little-endian length followed by its bytes."""
    parts = []
    for item in items:
        raw = bytes(item)
        if len(raw) > 0xFFFFFFFF:
            raise InvalidArgument(f"a bytes item of {len(raw)} bytes does not fit a 4-byte length")
        parts.append(len(raw).to_bytes(4, "little"))
        parts.append(raw)
    return b"".join(parts)


def _input_entry(value: Any, index: int, data: List[Any]) -> Dict[str, Any]:
    """The header entry of one input; an array input also appends its data to `data`."""
    if is_bytes_input(value):
        items = [value] if isinstance(value, _BYTE_STRINGS) else list(value)
        data.append(encode_bytes_items(items))
        return {"dtype": "bytes", "shape": [len(items)]}
    if isinstance(value, ShmTensor):
        return {"dtype": wire_name(value.dtype), "shape": list(value.shape),
                "shm": {"region": value.token, "offset": int(value.offset)}}
    if isinstance(value, ShmRegion):
        raise InvalidArgument(f"input {index}: a ShmRegion is no input; pass region.write(array) "
                              "or ShmTensor(region, offset, dtype, shape)")
    array = to_wire_array(value, index)
    data.append(array)
    return {"dtype": wire_name(array.dtype), "shape": list(array.shape)}


def encode_request(request_id: int, model: str, inputs: Sequence[Any],
                   timeout_ms: int = 0, priority: int = 0,
                   output_shm: Optional[ShmOutput] = None,
                   deadline_unix_us: int = 0) -> List[Any]:
    """The frames of one request: the JSON header, then a memoryview per input not in shared
    memory."""
    arrays: List[Any] = []  # numpy arrays, and bytes for "bytes" inputs
    if len(inputs) == 1 and isinstance(inputs[0], Mapping):
        # Named inputs ({"x": array, ...}): any order; the farm puts them into the model's.
        entries = []
        for i, (name, value) in enumerate(inputs[0].items()):
            entry = _input_entry(value, i, arrays)
            entry["name"] = str(name)
            entries.append(entry)
    else:
        entries = [_input_entry(value, i, arrays) for i, value in enumerate(inputs)]
    header: Dict[str, Any] = {
        "v": PROTOCOL_VERSION,
        "id": request_id,
        "model": model,
        "inputs": entries,
    }
    if timeout_ms > 0:
        header["timeout_ms"] = int(timeout_ms)
    if deadline_unix_us > 0:
        header["deadline_unix_us"] = int(deadline_unix_us)
    if priority:
        header["priority"] = int(priority)
    if output_shm is not None:
        header["output_shm"] = {"region": output_shm.token, "offset": int(output_shm.offset),
                                "bytes": int(output_shm.nbytes)}
    frames: List[Any] = [json.dumps(header).encode()]
    # reshape(-1) of a contiguous array is a view; uint8 view makes a plain byte buffer for libzmq.
    frames.extend(a if isinstance(a, bytes) else memoryview(a.reshape(-1).view(np.uint8))
                  for a in arrays)
    return frames


def encode_shm_create(request_id: int, nbytes: int) -> List[bytes]:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
        raise InvalidArgument(f"create_shm: nbytes must be a positive integer, got {nbytes!r}")
    return [json.dumps({"v": PROTOCOL_VERSION, "id": request_id, "op": "shm_create",
                        "bytes": int(nbytes)}).encode()]


def encode_shm_release(request_id: int, region: str) -> List[bytes]:
    return [json.dumps({"v": PROTOCOL_VERSION, "id": request_id, "op": "shm_release",
                        "region": region}).encode()]


def reply_id(header_frame: Any) -> Tuple[Optional[Any], Optional[dict]]:
    """Parses a reply header frame; returns (id, header), or (None, None) when unreadable."""
    try:
        header = json.loads(bytes(header_frame))
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(header, dict):
        return None, None
    return header.get("id"), header


def check_status(header: dict) -> None:
    """Raises the TorchfarmError of an error reply, or Internal for a reply neither ok nor
    error."""
    status = header.get("status")
    if status == "error":
        raise error_from_reply(str(header.get("code", "INTERNAL")), str(header.get("message", "")))
    if status != "ok":
        raise Internal(f"malformed reply: status {status!r}")


def decode_shm_create(header: dict) -> Tuple[str, str, int]:
    """``(region token, name, bytes)`` of a shm_create reply, or raises its error."""
    check_status(header)
    shm = header.get("shm")
    try:
        region, name, nbytes = shm["region"], shm["name"], shm["bytes"]
    except (KeyError, TypeError):
        raise Internal(f"malformed reply: shm_create answered {shm!r}") from None
    if not (isinstance(region, str) and region and isinstance(name, str)
            and isinstance(nbytes, int) and nbytes > 0):
        raise Internal(f"malformed reply: shm_create answered {shm!r}")
    return region, name, nbytes


def _output_spec(index: int, spec: Any) -> Tuple[np.dtype, Tuple[int, ...]]:
    try:
        return NUMPY_DTYPES[spec["dtype"]], tuple(int(d) for d in spec["shape"])
    except (KeyError, TypeError, ValueError):
        raise Internal(f"malformed reply: output {index}: unreadable spec {spec!r} (bfloat16 "
                       "outputs are unsupported in the Python client)") from None


def _frame_output(index: int, spec: dict, dtype: np.dtype, shape: Tuple[int, ...],
                  frame: Any) -> np.ndarray:
    buffer = getattr(frame, "buffer", frame)  # zmq.Frame when received with copy=False
    expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if len(buffer) != expected:
        raise Internal(f"malformed reply: output {index}: {len(buffer)} bytes for "
                       f"{spec['dtype']} {list(shape)} ({expected} expected)")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _shm_output(index: int, location: Any, dtype: np.dtype, shape: Tuple[int, ...],
                output_shm: Optional[ShmOutput]) -> np.ndarray:
    """A view of an output the supervisor wrote into the request's output_shm range, after
    checking that the reply names that range."""
    if output_shm is None:
        raise Internal(f"malformed reply: output {index} is in shared memory ({location!r}) but "
                       "the request named no output_shm")
    try:
        region, offset = location["region"], location["offset"]
    except (KeyError, TypeError):
        raise Internal(f"malformed reply: output {index}: unreadable shm {location!r}") from None
    nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    end = output_shm.offset + output_shm.nbytes
    if (region != output_shm.token or not isinstance(offset, int)
            or offset < output_shm.offset or offset + nbytes > end):
        raise Internal(f"malformed reply: output {index}: {nbytes} bytes at {location!r}, "
                       f"outside the request's output_shm range [{output_shm.offset}, {end})")
    return output_shm.region.output_view(dtype, shape, offset)


class Outputs(list):
    """A reply's outputs: a list of arrays in the model's order (as before names), that also
    knows each output's name (``names``; the model config's, else ``OUTPUT__k``) and is indexed
    by name too: ``outputs["logits"]``."""

    def __init__(self, arrays: Sequence[np.ndarray], names: Sequence[str]) -> None:
        super().__init__(arrays)
        self.names: List[str] = list(names)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return list.__getitem__(self, self.names.index(key))
            except ValueError:
                raise KeyError(f"no output is named {key!r} (outputs: "
                               f"{', '.join(self.names)})") from None
        return list.__getitem__(self, key)

    def as_dict(self) -> Dict[str, np.ndarray]:
        """``{name: array}`` in output order."""
        return dict(zip(self.names, self))


def output_names(header: dict) -> List[str]:
    """Each output's name in an ok reply header; ``OUTPUT__k`` where a reply (from a farm before
    names) has none."""
    specs = header.get("outputs")
    if not isinstance(specs, list):
        return []
    return [s["name"] if isinstance(s, dict) and isinstance(s.get("name"), str) else f"OUTPUT__{k}"
            for k, s in enumerate(specs)]


def decode_reply(header: dict, data_frames: Sequence[Any],
                 output_shm: Optional[ShmOutput] = None) -> "Outputs":
    """Outputs of a reply, or raises the TorchfarmError of an error reply.

    Each output is a read-only numpy view over its received frame, or over the region of
    `output_shm` (the request's) when the reply says it is there; no copy. Call ``.copy()`` on
    it to get a writable array of your own.
    """
    check_status(header)
    specs = header.get("outputs")
    in_frames = [not (isinstance(s, dict) and s.get("shm") is not None)
                 for s in specs] if isinstance(specs, list) else []
    if not isinstance(specs, list) or sum(in_frames) != len(data_frames):
        raise Internal(f"malformed reply: {len(data_frames)} data frames for outputs {specs!r}")
    frames = iter(data_frames)
    outputs = []
    for i, (spec, in_frame) in enumerate(zip(specs, in_frames)):
        dtype, shape = _output_spec(i, spec)
        if in_frame:
            outputs.append(_frame_output(i, spec, dtype, shape, next(frames)))
        else:
            outputs.append(_shm_output(i, spec["shm"], dtype, shape, output_shm))
    return Outputs(outputs, output_names(header))
