"""Shared-memory tensors in the Python client (protocol.md, "Shared-memory tensors").

The first half checks encoding, decoding and the region's own checks without a farm, on regions
this test makes in /dev/shm itself; the second half runs against the farm conftest.py starts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import stat

import numpy as np
import pytest
import zmq

import torchfarm
from torchfarm import _wire
from torchfarm.shm import ShmOutput, ShmRegion, ShmTensor, map_region
from conftest import IDENTITY_DTYPES, random_array

RNG = np.random.default_rng(11)
_names = itertools.count()


def _random(dtype: str, shape=(3, 5)) -> np.ndarray:
    return random_array(RNG, dtype, shape)


def _in_region(array: np.ndarray, region: ShmRegion) -> bool:
    return np.shares_memory(array, np.frombuffer(region.buffer, np.uint8))


# -- without a farm ----------------------------------------------------------------------------


@pytest.fixture
def local_region():
    """A ShmRegion over a /dev/shm object this test creates; release() only unmaps it."""
    made = []

    def make(nbytes: int = 1024) -> ShmRegion:
        name = f"/tf-pytest-{os.getpid()}-{next(_names)}"
        path = "/dev/shm" + name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)
        finally:
            os.close(fd)
        made.append(path)
        released = []
        region = ShmRegion(f"token-{name}", name, nbytes, map_region(name, nbytes),
                           lambda r: (released.append(r), r.unmap()))
        region.releases = released  # what the test inspects
        return region

    yield make
    for path in made:
        os.unlink(path)


def test_shm_inputs_and_output_shm_are_encoded_in_the_header(local_region):
    region = local_region(1024)
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    y = np.ones((3, 5), np.float32)
    t = region.write(x, offset=64)
    assert t == ShmTensor(region, 64, "float32", [3, 5]) and t.nbytes == 60
    frames = _wire.encode_request(3, "pair", [t, y], output_shm=ShmOutput(region, 128, 256))
    assert json.loads(bytes(frames[0])) == {
        "v": 1, "id": 3, "model": "pair",
        "inputs": [{"dtype": "float32", "shape": [3, 5],
                    "shm": {"region": region.region, "offset": 64}},
                   {"dtype": "float32", "shape": [3, 5]}],
        "output_shm": {"region": region.region, "offset": 128, "bytes": 256}}
    assert len(frames) == 2 and bytes(frames[1]) == y.tobytes()  # only the frame input
    # A token stands for a region mapped elsewhere; a whole region as output_shm is all of it.
    frames = _wire.encode_request(4, "m", [ShmTensor("abc", 8, np.int64, ())],
                                  output_shm=torchfarm.shm.as_output_shm(region))
    header = json.loads(bytes(frames[0]))
    assert header["inputs"] == [{"dtype": "int64", "shape": [], "shm": {"region": "abc",
                                                                        "offset": 8}}]
    assert header["output_shm"] == {"region": region.region, "offset": 0, "bytes": 1024}
    assert len(frames) == 1


def test_shm_requests_are_single_frames():
    assert json.loads(bytes(_wire.encode_shm_create(5, 4096)[0])) == {
        "v": 1, "id": 5, "op": "shm_create", "bytes": 4096}
    assert json.loads(bytes(_wire.encode_shm_release(6, "f00d")[0])) == {
        "v": 1, "id": 6, "op": "shm_release", "region": "f00d"}
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(torchfarm.InvalidArgument, match="positive integer"):
            _wire.encode_shm_create(1, bad)


def test_shm_create_reply_is_checked():
    ok = {"status": "ok", "shm": {"region": "ab12", "name": "/torchfarm-x", "bytes": 64}}
    assert _wire.decode_shm_create(ok) == ("ab12", "/torchfarm-x", 64)
    with pytest.raises(torchfarm.ResourceExhausted, match="max_regions"):
        _wire.decode_shm_create({"status": "error", "code": "RESOURCE_EXHAUSTED",
                                 "message": "client_shm.max_regions"})
    for shm in (None, {"region": "ab12", "name": "/x"}, {"region": 1, "name": "/x", "bytes": 2}):
        with pytest.raises(torchfarm.Internal, match="malformed reply"):
            _wire.decode_shm_create({"status": "ok", "shm": shm})


def test_write_array_and_buffer_see_the_same_bytes(local_region):
    region = local_region(256)
    x = np.arange(6, dtype=">i4").reshape(2, 3)[:, ::2]  # big-endian, strided: converted
    t = region.write(x, offset=8)
    assert t.dtype == np.dtype("<i4") and t.shape == (2, 2)
    view = region.array(np.int32, (2, 2), offset=8)
    assert view.tolist() == [[0, 2], [3, 5]] and view.flags.writeable
    view[0, 0] = 7
    assert bytes(region.buffer[8:12]) == np.int32(7).tobytes()
    assert region.write(np.bool_(True), offset=255).shape == ()


def test_client_side_mistakes_are_invalid_argument(local_region):
    region = local_region(256)
    with pytest.raises(torchfarm.InvalidArgument,
                       match=r"array of 512 bytes does not fit in region .* of 256 bytes at "
                             r"offset 0"):
        region.write(np.zeros(128, np.float32))
    with pytest.raises(torchfarm.InvalidArgument, match="of 256 bytes at offset 200"):
        region.array("float64", (8,), offset=200)
    with pytest.raises(torchfarm.InvalidArgument, match="offset 2 is not a multiple of the "
                                                        "float32 item size 4"):
        region.write(np.zeros(4, np.float32), offset=2)
    with pytest.raises(torchfarm.InvalidArgument, match="offset 6 is not a multiple"):
        ShmTensor("token", 6, np.int64, (1,))
    with pytest.raises(torchfarm.InvalidArgument, match="ShmTensor of 264 bytes does not fit"):
        ShmTensor(region, 0, "float64", (33,))
    with pytest.raises(torchfarm.InvalidArgument, match="non-negative integer"):
        region.write(np.zeros(1, np.uint8), offset=-1)
    with pytest.raises(torchfarm.InvalidArgument, match="dtype complex64"):
        ShmTensor(region, 0, np.complex64, (1,))
    with pytest.raises(torchfarm.InvalidArgument, match="offset 32 is not a non-negative "
                                                        "multiple of 64"):
        ShmOutput(region, 32)
    with pytest.raises(torchfarm.InvalidArgument, match="range of 200 bytes at offset 64 does "
                                                        "not fit in region .* of 256 bytes"):
        ShmOutput(region, 64, 200)
    with pytest.raises(torchfarm.InvalidArgument, match="must be a ShmRegion mapped"):
        ShmOutput("token")
    with pytest.raises(torchfarm.InvalidArgument, match="input 0: a ShmRegion is no input"):
        _wire.encode_request(1, "m", [region])
    assert ShmOutput(region, 64).nbytes == 192


def test_shm_outputs_decode_to_read_only_views_of_the_range(local_region):
    region = local_region(512)
    a, b = np.arange(15, dtype=np.float32).reshape(3, 5), np.arange(4, dtype=np.int64)
    region.write(a, offset=64)
    region.write(b, offset=128)
    output = ShmOutput(region, 64, 256)
    header = {"status": "ok", "outputs": [
        {"dtype": "float32", "shape": [3, 5], "shm": {"region": region.region, "offset": 64}},
        {"dtype": "int64", "shape": [4], "shm": {"region": region.region, "offset": 128}}]}
    y, z = _wire.decode_reply(header, [], output)
    assert np.array_equal(y, a) and np.array_equal(z, b)
    assert _in_region(y, region) and _in_region(z, region)
    assert not y.flags.writeable
    region.write(b + 1, offset=128)  # the next request that writes the range changes them
    assert z.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("location,why", [
    ({"region": "other", "offset": 64}, "outside the request's output_shm range"),
    ({"region": "SAME", "offset": 0}, r"outside the request's output_shm range \[64, 320\)"),
    ({"region": "SAME", "offset": 300}, "60 bytes at"),
    ({"region": "SAME"}, "unreadable shm"),
])
def test_shm_outputs_outside_the_range_are_malformed(local_region, location, why):
    region = local_region(512)
    location = {k: (region.region if v == "SAME" else v) for k, v in location.items()}
    header = {"status": "ok",
              "outputs": [{"dtype": "float32", "shape": [3, 5], "shm": location}]}
    with pytest.raises(torchfarm.Internal, match=why):
        _wire.decode_reply(header, [], ShmOutput(region, 64, 256))


def test_shm_outputs_without_output_shm_and_frame_counts_are_malformed(local_region):
    region = local_region(256)
    spec = {"dtype": "uint8", "shape": [2], "shm": {"region": region.region, "offset": 0}}
    with pytest.raises(torchfarm.Internal, match="named no output_shm"):
        _wire.decode_reply({"status": "ok", "outputs": [spec]}, [])
    with pytest.raises(torchfarm.Internal, match="1 data frames"):
        _wire.decode_reply({"status": "ok", "outputs": [spec]}, [b"\0\0"], ShmOutput(region))
    plain = {"dtype": "uint8", "shape": [2]}
    y, z = _wire.decode_reply({"status": "ok", "outputs": [spec, plain]}, [b"\1\2"],
                              ShmOutput(region))
    assert y.tolist() == [0, 0] and z.tolist() == [1, 2]


def test_release_unmaps_once_and_keeps_live_views_readable(local_region):
    region = local_region(64)
    view = region.array(np.uint8, (4,))
    view[:] = 9
    with region:
        assert not region.released
    assert region.released and len(region.releases) == 1
    region.release()
    assert len(region.releases) == 2  # the client's release_shm makes a second one a no-op
    assert view.tolist() == [9, 9, 9, 9]
    with pytest.raises(torchfarm.InvalidArgument, match="was released"):
        region.write(np.zeros(1, np.uint8))
    assert "released" in repr(region)


def test_map_region_refuses_paths_and_explains_a_missing_region():
    with pytest.raises(torchfarm.Internal, match="not a plain name"):
        map_region("/../etc/passwd", 16)
    with pytest.raises(torchfarm.InvalidArgument, match="only on the supervisor's host"):
        map_region(f"/tf-pytest-missing-{os.getpid()}", 16)


def test_a_spreading_client_refuses_shared_memory(tmp_path):
    endpoints = [f"ipc://{tmp_path}/a.sock", f"ipc://{tmp_path}/b.sock"]
    with torchfarm.Client(endpoints, timeout=0.2) as client:
        with pytest.raises(torchfarm.InvalidArgument, match="create_shm needs a client with one "
                                                            "endpoint.*over 2"):
            client.create_shm(64)
        with pytest.raises(torchfarm.InvalidArgument, match="shared-memory tensor needs"):
            client.infer("m", ShmTensor("token", 0, np.uint8, (1,)))

    async def run():
        async with torchfarm.AsyncClient(endpoints, timeout=0.2) as client:
            with pytest.raises(torchfarm.InvalidArgument, match="one endpoint"):
                await client.create_shm(64)

    asyncio.run(run())


# -- against the farm --------------------------------------------------------------------------


@pytest.fixture
def client(farm):
    with torchfarm.Client(farm.endpoint, timeout=10, admin_endpoint=farm.admin_endpoint) as c:
        yield c


def _raw_request(farm, header: dict, *frames) -> dict:
    """Sends a hand-written request (bypassing the client's own checks); returns the reply."""
    with zmq.Context.instance().socket(zmq.DEALER) as socket:
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(farm.endpoint)
        socket.send_multipart([json.dumps(header).encode(), *frames])
        assert socket.poll(10000), "no reply from the farm"
        return json.loads(socket.recv_multipart()[0])


@pytest.mark.parametrize("dtype", IDENTITY_DTYPES)
def test_identity_round_trip_through_shared_memory(client, dtype):
    x = _random(dtype)
    with client.create_shm(4096) as region:
        (y,) = client.infer(f"identity_{dtype}", region.write(x, offset=64),
                            output_shm=ShmOutput(region, 1024, 2048))
        assert y.dtype == x.dtype and y.shape == x.shape and y.tobytes() == x.tobytes()
        assert _in_region(y, region) and not y.flags.writeable
        assert region.array(dtype, x.shape, offset=1024).tobytes() == x.tobytes()


def test_inputs_and_outputs_may_share_one_range(client):
    x = _random("int64", (4, 8))
    with client.create_shm(256) as region:
        (y,) = client.infer("identity_int64", region.write(x), output_shm=region)
        assert np.array_equal(y, x) and _in_region(y, region)


def test_mixed_frame_and_shm_inputs(client):
    a, b = _random("float32"), _random("float32")
    with client.create_shm(4096) as region:
        in_shm = region.write(a)
        s, p = client.infer("pair", in_shm, b)  # the one frame belongs to input 1
        np.testing.assert_allclose(s, a + b, rtol=1e-6)
        np.testing.assert_allclose(p, a * b, rtol=1e-6)
        s, p = client.infer("pair", b, in_shm)
        np.testing.assert_allclose(p, a * b, rtol=1e-6)
        s, p = client.infer("pair", in_shm, region.write(b, offset=64),
                            output_shm=ShmOutput(region, 1024))
        np.testing.assert_allclose(s, a + b, rtol=1e-6)
        np.testing.assert_allclose(p, a * b, rtol=1e-6)
        # 60 bytes of output 0 at 1024, output 1 at the next multiple of 64.
        assert np.array_equal(region.array(np.float32, (3, 5), offset=1024 + 64), p)


def test_shm_input_with_frame_output(client):
    x = _random("uint8", (2, 7))
    with client.create_shm(64) as region:
        (y,) = client.infer("identity_uint8", region.write(x, offset=3))
        assert np.array_equal(y, x) and not _in_region(y, region)


def test_infer_many_reads_each_request_from_its_range(client):
    with client.create_shm(64 * 20) as region:
        tensors = [region.write(np.full((1, 3), i, np.int32), offset=64 * i) for i in range(20)]
        results = client.infer_many("identity_int32", tensors, max_in_flight=8)
        assert [int(r[0][0, 0]) for r in results] == list(range(20))


def test_torch_tensors_are_written_into_a_region(client):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    with client.create_shm(256) as region:
        (y,) = client.infer("identity_float64", region.write(t.t()), output_shm=region)
        assert np.array_equal(y, t.t().numpy())


def test_region_file_lives_until_release(client):
    region = client.create_shm(100000)
    path = "/dev/shm/" + region.name.lstrip("/")
    try:
        info = os.stat(path)
        assert info.st_size == 100000 == region.nbytes
        assert stat.S_IMODE(info.st_mode) & 0o007 == 0  # 0600, or 0660 with an ipc_group
        assert not any(region.buffer)  # zero-filled
        assert len(region.region) >= 32  # a 128-bit token in hex
    finally:
        region.release()
    assert region.released and not os.path.exists(path)
    region.release()  # idempotent
    client.release_shm(region)


def test_a_released_region_is_not_found(client):
    region = client.create_shm(1024)
    tensor = region.write(np.zeros((1, 4), np.float32))
    output = ShmOutput(region, 512)
    region.release()
    with pytest.raises(torchfarm.NotFound) as info:
        client.infer("identity_float32", tensor)
    assert "inputs[0].shm.region" in info.value.message
    with pytest.raises(torchfarm.NotFound, match="output_shm.region"):
        client.infer("identity_float32", np.zeros((1, 4), np.float32), output_shm=output)
    with pytest.raises(torchfarm.NotFound):
        client.release_shm(region.region)


def test_misaligned_offsets_are_refused(client, farm):
    with client.create_shm(1024) as region:
        with pytest.raises(torchfarm.InvalidArgument, match="multiple"):
            region.write(np.zeros((1, 4), np.float32), offset=2)
        with pytest.raises(torchfarm.InvalidArgument, match="multiple of 64"):
            ShmOutput(region, 96)
        # The farm checks too, for clients that do not.
        entry = {"dtype": "float32", "shape": [1, 4]}
        misaligned = [
            {"inputs": [dict(entry, shm={"region": region.region, "offset": 2})]},
            {"inputs": [entry], "output_shm": {"region": region.region, "offset": 96,
                                               "bytes": 256}},
            {"inputs": [dict(entry, shm={"region": region.region, "offset": 1020})]},  # past end
        ]
        for i, fields in enumerate(misaligned):
            header = dict({"v": 1, "id": 90 + i, "model": "identity_float32"}, **fields)
            frames = [] if "shm" in fields["inputs"][0] else [np.zeros(4, np.float32).tobytes()]
            reply = _raw_request(farm, header, *frames)
            assert reply["status"] == "error" and reply["code"] == "INVALID_ARGUMENT", reply
            assert "shm" in reply["message"], reply


def test_too_small_output_range_is_resource_exhausted(client):
    x = _random("float32")  # 60 bytes of output
    with client.create_shm(1024) as region:
        with pytest.raises(torchfarm.ResourceExhausted) as info:
            client.infer("identity_float32", x, output_shm=ShmOutput(region, 0, 16))
        assert "60" in info.value.message and "16" in info.value.message
        (y,) = client.infer("identity_float32", x, output_shm=ShmOutput(region, 0, 64))
        assert np.array_equal(y, x)


def test_async_client_shared_memory(farm):
    async def run():
        async with torchfarm.AsyncClient(farm.endpoint, timeout=10) as client:
            async with await client.create_shm(64 * 40) as region:
                inputs = [np.full((2, 2), i, np.float64) for i in range(20)]
                tensors = [region.write(x, offset=64 * i) for i, x in enumerate(inputs)]
                outputs = [ShmOutput(region, 64 * (20 + i), 64) for i in range(20)]
                results = await asyncio.gather(
                    *(client.infer("identity_float64", t, output_shm=o)
                      for t, o in zip(tensors, outputs)))
                for x, (y,) in zip(inputs, results):
                    assert np.array_equal(x, y) and _in_region(y, region)
                (z,) = await client.infer("identity_float64", tensors[3])
                assert np.array_equal(z, inputs[3])
                path = "/dev/shm/" + region.name.lstrip("/")
                assert os.path.exists(path)
            assert region.released and not os.path.exists(path)
            await region.release()  # idempotent
            with pytest.raises(torchfarm.NotFound):
                await client.infer("identity_float64", tensors[0])
            with pytest.raises(TypeError, match="async with"):
                with region:
                    pass

    asyncio.run(run())
