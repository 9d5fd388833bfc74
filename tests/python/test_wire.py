"""The Python client's encoding and decoding, without a farm."""

from __future__ import annotations

import json

import numpy as np
import pytest

import torchfarm
from torchfarm import _wire


def _header(frames) -> dict:
    return json.loads(bytes(frames[0]))


def test_request_frames_follow_protocol_v1():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    frames = _wire.encode_request(7, "identity", [x], timeout_ms=250, priority=2)
    assert _header(frames) == {"v": 1, "id": 7, "model": "identity", "timeout_ms": 250,
                               "priority": 2, "inputs": [{"dtype": "int32", "shape": [2, 3]}]}
    assert bytes(frames[1]) == x.tobytes()


def test_a_client_deadline_travels_as_deadline_unix_us():
    x = np.zeros((1, 2), dtype=np.float32)
    header = _header(_wire.encode_request(3, "m", [x], deadline_unix_us=1733550000123456))
    assert header["deadline_unix_us"] == 1733550000123456 and "timeout_ms" not in header
    assert "deadline_unix_us" not in _header(_wire.encode_request(3, "m", [x]))


def test_numpy_input_is_sent_without_copy():
    x = np.ones((4, 256), dtype=np.float32)
    frame = _wire.encode_request(1, "mlp", [x])[1]
    assert np.shares_memory(np.frombuffer(frame, dtype=np.uint8), x)


def test_big_endian_and_strided_inputs_become_little_endian_contiguous():
    x = np.arange(12, dtype=">f8").reshape(3, 4)[:, ::2]
    frames = _wire.encode_request(1, "m", [x])
    assert _header(frames)["inputs"] == [{"dtype": "float64", "shape": [3, 2]}]
    assert bytes(frames[1]) == np.ascontiguousarray(x, dtype="<f8").tobytes()


def test_lists_and_scalars_are_array_likes():
    frames = _wire.encode_request(1, "m", [[[1.5, 2.5]], 3])
    assert _header(frames)["inputs"] == [{"dtype": "float64", "shape": [1, 2]},
                                         {"dtype": "int64", "shape": []}]


@pytest.mark.parametrize("value", [np.zeros(2, np.complex64), np.zeros(2, np.uint16), ["a", "b"]])
def test_unsupported_dtypes_raise_invalid_argument(value):
    with pytest.raises(torchfarm.InvalidArgument, match="input 0: dtype"):
        _wire.encode_request(1, "m", [value])


def test_torch_tensors_are_accepted_and_bfloat16_is_refused():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    frames = _wire.encode_request(1, "m", [t, t.t()])
    assert _header(frames)["inputs"][1] == {"dtype": "float32", "shape": [3, 2]}
    assert bytes(frames[2]) == t.t().contiguous().numpy().tobytes()
    assert np.shares_memory(np.frombuffer(frames[1], dtype=np.uint8), t.numpy())
    with pytest.raises(torchfarm.InvalidArgument, match="bfloat16"):
        _wire.encode_request(1, "m", [t.to(torch.bfloat16)])


def test_ok_reply_decodes_to_read_only_views():
    y = np.arange(4, dtype=np.float16).reshape(2, 2)
    header = {"status": "ok", "outputs": [{"dtype": "float16", "shape": [2, 2]}]}
    (out,) = _wire.decode_reply(header, [y.tobytes()])
    assert out.dtype == np.float16 and np.array_equal(out, y)
    assert not out.flags.writeable


def test_named_inputs_carry_their_names_in_the_mappings_order():
    x = np.ones((1, 4), dtype=np.float32)
    y = np.zeros((1, 4), dtype=np.float32)
    frames = _wire.encode_request(3, "add2", [{"y": y, "x": x}])
    assert _header(frames)["inputs"] == [{"dtype": "float32", "shape": [1, 4], "name": "y"},
                                         {"dtype": "float32", "shape": [1, 4], "name": "x"}]
    assert bytes(frames[1]) == y.tobytes() and bytes(frames[2]) == x.tobytes()


def test_outputs_are_a_list_that_knows_their_names():
    a = np.arange(2, dtype=np.int64)
    b = np.arange(3, dtype=np.float32)
    header = {"status": "ok", "outputs": [{"dtype": "int64", "name": "ids", "shape": [2]},
                                          {"dtype": "float32", "shape": [3]}]}
    outputs = _wire.decode_reply(header, [a.tobytes(), b.tobytes()])
    assert isinstance(outputs, list) and len(outputs) == 2
    first, second = outputs  # unpacks as before names
    assert np.array_equal(first, a) and np.array_equal(second, b)
    assert outputs.names == ["ids", "OUTPUT__1"]  # a reply without a name: OUTPUT__k
    assert np.array_equal(outputs["ids"], a) and np.array_equal(outputs[-1], b)
    assert list(outputs.as_dict()) == ["ids", "OUTPUT__1"]
    with pytest.raises(KeyError, match="no output is named 'logits'"):
        outputs["logits"]


@pytest.mark.parametrize("code,cls", [
    ("INVALID_ARGUMENT", torchfarm.InvalidArgument), ("NOT_FOUND", torchfarm.NotFound),
    ("RESOURCE_EXHAUSTED", torchfarm.ResourceExhausted),
    ("DEADLINE_EXCEEDED", torchfarm.DeadlineExceeded), ("UNAVAILABLE", torchfarm.Unavailable),
    ("INTERNAL", torchfarm.Internal)])
def test_error_replies_map_to_subclasses(code, cls):
    with pytest.raises(cls) as info:
        _wire.decode_reply({"status": "error", "code": code, "message": "why"}, [])
    assert info.value.code == code and info.value.message == "why"
    assert isinstance(info.value, torchfarm.TorchfarmError)
    assert str(info.value) == f"{code}: why"


def test_malformed_replies_are_internal():
    with pytest.raises(torchfarm.Internal, match="malformed reply"):
        _wire.decode_reply({"status": "ok", "outputs": [{"dtype": "float32", "shape": [2]}]},
                           [b"\0" * 4])
    with pytest.raises(torchfarm.Internal, match="bfloat16"):
        _wire.decode_reply({"status": "ok", "outputs": [{"dtype": "bfloat16", "shape": [1]}]},
                           [b"\0" * 2])


def test_deadline_exceeded_is_a_timeout_error():
    assert issubclass(torchfarm.DeadlineExceeded, TimeoutError)
    assert torchfarm.__version__


def test_byte_strings_are_one_bytes_input_of_length_prefixed_items():
    frames = _wire.encode_request(2, "resnet18", [[b"\xff\xd8jpeg", b"", bytearray(b"xy")]])
    assert _header(frames)["inputs"] == [{"dtype": "bytes", "shape": [3]}]
    assert bytes(frames[1]) == (b"\x06\x00\x00\x00\xff\xd8jpeg" + b"\x00\x00\x00\x00"
                                + b"\x02\x00\x00\x00xy")
    # One bytes object is a batch of one.
    one = _wire.encode_request(3, "resnet18", [b"abc"])
    assert _header(one)["inputs"] == [{"dtype": "bytes", "shape": [1]}]
    assert bytes(one[1]) == b"\x03\x00\x00\x00abc"
    # A list of numbers stays a numeric tensor.
    numbers = _wire.encode_request(4, "m", [[1, 2]])
    assert _header(numbers)["inputs"][0]["dtype"] == "int64"
