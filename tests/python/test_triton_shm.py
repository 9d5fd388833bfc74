"""Triton's system shared memory extension as a tritonclient user writes it (issue 30): the client
creates POSIX regions with tritonclient.utils.shared_memory, registers them over HTTP or gRPC,
names them in inference requests' inputs and outputs, reads the outputs from its own region, asks
the status and unregisters. Then every hostile case the issue lists, each followed by a good
request that must succeed.

Runs on the session farm of conftest.py, which turns frontend.system_shared_memory on. Outputs are
held against numpy (identity) and against PyTorch running the same TorchScript file (mlp).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

PID = os.getpid()


def key(name: str) -> str:
    return f"/tf-test-{PID}-{name}"


@pytest.fixture(params=["http", "grpc"])
def client(request, farm):
    module = httpclient if request.param == "http" else grpcclient
    url = farm.http_endpoint if request.param == "http" else farm.grpc_endpoint
    c = module.InferenceServerClient(url=url)
    c.test_url = url  # a thread of the test makes its own client (tritonclient.http is gevent's)
    c.unregister_system_shared_memory()
    yield module, c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture
def regions():
    """Regions made by the test, destroyed at its end."""
    made = []

    def make(name: str, byte_size: int):
        handle = shm.create_shared_memory_region(name, key(name), byte_size)
        made.append(handle)
        return handle

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def status_of(module, c, name=""):
    """The status as [(name, key, offset, byte_size)] in either protocol."""
    status = c.get_system_shared_memory_status(name)
    if module is httpclient:
        return sorted((r["name"], r["key"], int(r["offset"]), int(r["byte_size"])) for r in status)
    return sorted((r.name, r.key, r.offset, r.byte_size) for r in status.regions.values())


def shm_infer(module, c, model, x, in_region, out_region, out_bytes, in_offset=0, out_offset=0,
              in_bytes=None, input_name="INPUT__0", output_name="OUTPUT__0"):
    inputs = [module.InferInput(input_name, list(x.shape), "FP32")]
    inputs[0].set_shared_memory(in_region, x.nbytes if in_bytes is None else in_bytes,
                                offset=in_offset)
    outputs = [module.InferRequestedOutput(output_name)]
    outputs[0].set_shared_memory(out_region, out_bytes, offset=out_offset)
    return c.infer(model, inputs, outputs=outputs)


def output_shape(module, result, name="OUTPUT__0"):
    output = result.get_output(name)
    return list(output["shape"]) if module is httpclient else list(output.shape)


def test_server_metadata_lists_system_shared_memory(farm):
    http = httpclient.InferenceServerClient(url=farm.http_endpoint)
    grpc = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    assert "system_shared_memory" in http.get_server_metadata()["extensions"]
    assert "system_shared_memory" in grpc.get_server_metadata().extensions


def test_identity_round_trip_inputs_and_outputs_in_shared_memory(client, regions):
    module, c = client
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    in_handle = regions("in", x.nbytes)
    out_handle = regions("out", x.nbytes + 100)
    shm.set_shared_memory_region(in_handle, [x])
    c.register_system_shared_memory("in", key("in"), x.nbytes)
    # Registered at offset 100 of its object: request offsets count from there.
    c.register_system_shared_memory("out", key("out"), x.nbytes, offset=100)
    assert status_of(module, c) == [("in", key("in"), 0, x.nbytes),
                                    ("out", key("out"), 100, x.nbytes)]
    assert status_of(module, c, "out") == [("out", key("out"), 100, x.nbytes)]
    for _ in range(3):
        result = shm_infer(module, c, "identity_float32", x, "in", "out", x.nbytes)
        assert output_shape(module, result) == [4, 16]
        # As Triton: the answer names the place and carries no data.
        output = result.get_output("OUTPUT__0")
        if module is httpclient:
            assert output == {"name": "OUTPUT__0", "datatype": "FP32", "shape": [4, 16]}
        else:
            assert output.parameters["shared_memory_region"].string_param == "out"
            assert result.get_response().raw_output_contents[0] == b""
        y = shm.get_contents_as_numpy(out_handle, np.float32, [4, 16], offset=100)
        np.testing.assert_array_equal(y, x)
        x = x + 1
        shm.set_shared_memory_region(in_handle, [x])
    c.unregister_system_shared_memory("in")
    assert status_of(module, c) == [("out", key("out"), 100, x.nbytes)]
    c.unregister_system_shared_memory()
    assert status_of(module, c) == []


def test_mlp_outputs_equal_pytorch(farm, client, regions):
    torch = pytest.importorskip("torch")
    module, c = client
    model = torch.jit.load(str(farm.model_dir / "mlp.pt"))
    x = np.random.default_rng(2).standard_normal((3, 256)).astype(np.float32)
    expected = model(torch.from_numpy(x)).detach().numpy()
    # One region for both, as tritonclient's examples do: input at 0, output after it.
    handle = regions("both", x.nbytes + expected.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("both", key("both"), x.nbytes + expected.nbytes)
    result = shm_infer(module, c, "mlp", x, "both", "both", expected.nbytes,
                       out_offset=x.nbytes)
    assert output_shape(module, result) == [3, 128]
    y = shm.get_contents_as_numpy(handle, np.float32, [3, 128], offset=x.nbytes)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    # Inputs in shared memory, outputs in the answer (and the other way round).
    inputs = [module.InferInput("INPUT__0", [3, 256], "FP32")]
    inputs[0].set_shared_memory("both", x.nbytes)
    result = c.infer("mlp", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-5, atol=1e-5)


def expect_error(call, *parts):
    with pytest.raises(InferenceServerException) as error:
        call()
    for part in parts:
        assert part in str(error.value), str(error.value)
    return str(error.value)


def good_request(module, c, regions_made, name="good"):
    """After every refusal: a good request on a fresh region succeeds with the right bytes."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    handle = regions_made(name, 2 * x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory(name, key(name), 2 * x.nbytes)
    shm_infer(module, c, "identity_float32", x, name, name, x.nbytes, out_offset=x.nbytes)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(handle, np.float32, [2, 4], offset=x.nbytes), x)
    c.unregister_system_shared_memory(name)


def test_hostile_registrations_then_a_good_request(client, regions):
    module, c = client
    regions("small", 64)
    target = Path(f"/dev/shm{key('small')}")
    link = Path(f"/dev/shm{key('link')}")
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    try:
        expect_error(lambda: c.register_system_shared_memory("l", key("link"), 64),
                     "is a symbolic link")
    finally:
        link.unlink()
    good_request(module, c, regions, "good1")
    expect_error(lambda: c.register_system_shared_memory("d", "/../etc/passwd", 64),
                 "expected a shared-memory key of the form \"/name\"")
    expect_error(lambda: c.register_system_shared_memory("d", "/a/b", 64), "of the form \"/name\"")
    expect_error(lambda: c.register_system_shared_memory("d", key("missing"), 64),
                 "no shared-memory object of that name")
    expect_error(lambda: c.register_system_shared_memory("s", key("small"), 65),
                 "offset 0 + byte_size 65 = 65 runs past the end of the object (64 bytes)")
    expect_error(lambda: c.register_system_shared_memory("s", key("small"), 64, offset=8),
                 "offset 8 + byte_size 64 = 72 runs past the end of the object (64 bytes)")
    c.register_system_shared_memory("s", key("small"), 64)
    expect_error(lambda: c.register_system_shared_memory("s", key("small"), 32),
                 "shared memory region 's' already in manager")
    expect_error(lambda: c.unregister_system_shared_memory("never"),
                 "Unable to find shared memory region: 'never'")
    expect_error(lambda: c.get_system_shared_memory_status("never"),
                 "Unable to find system shared memory region: 'never'")
    good_request(module, c, regions, "good2")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_region_of_another_user_is_refused(client, regions):
    module, c = client
    regions("theirs", 64)
    os.chown(f"/dev/shm{key('theirs')}", 65534, 65534)  # nobody
    expect_error(lambda: c.register_system_shared_memory("t", key("theirs"), 64),
                 "the object is owned by uid 65534; the supervisor runs as uid 0")
    good_request(module, c, regions)


def test_hostile_requests_then_a_good_one(client, regions):
    module, c = client
    x = np.ones((2, 4), dtype=np.float32)
    handle = regions("r", 64)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("r", key("r"), 64)
    # An unknown region.
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "nope", "r", 32),
                 "Unable to find shared memory region: 'nope'")
    # A byte size that does not match shape x datatype.
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "r", "r", 32, in_bytes=28),
                 "FP32 [2, 4] needs 32 bytes, parameters.shared_memory_byte_size is 28")
    # A lying offset: past the registered 64 bytes.
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "r", "r", 32, in_offset=40),
                 "Invalid offset + byte size for shared memory region: 'r': offset 40 + 32 bytes "
                 "= 72, the region has 64 bytes")
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "r", "r", 32,
                                   out_offset=48),
                 "offset 48 + 32 bytes = 80, the region has 64 bytes")
    # An output place smaller than the output.
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "r", "r", 16, out_offset=32),
                 "output 'OUTPUT__0': shared_memory_byte_size is 16 bytes, the output is "
                 "float32 [2, 4], 32 bytes")
    shm_infer(module, c, "identity_float32", x, "r", "r", 32, out_offset=32)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 4],
                                                            offset=32), x)
    good_request(module, c, regions)


def test_a_region_truncated_after_register_fails_its_request_and_the_worker_lives(client, regions,
                                                                                farm):
    module, c = client
    x = np.ones((2, 4), dtype=np.float32)
    regions("cut", 4096)
    c.register_system_shared_memory("cut", key("cut"), 4096)
    os.truncate(f"/dev/shm{key('cut')}", 16)
    expect_error(lambda: shm_infer(module, c, "identity_float32", x, "cut", "cut", 32,
                                   out_offset=64),
                 "the region shrank to 16 bytes after the request was accepted")
    good_request(module, c, regions)


def test_unregister_while_a_request_runs_waits_for_it(client, regions):
    module, c = client
    # slow: x[:, 0].max() units of work (~0.04-0.1 ms each), returns x.
    x = np.full((1, 4), 6000, dtype=np.float32)
    handle = regions("busy", 32)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("busy", key("busy"), 32)
    result = {}

    def run():
        try:
            own = module.InferenceServerClient(url=c.test_url)
            result["r"] = shm_infer(module, own, "slow", x, "busy", "busy", 16, out_offset=16)
            result["done"] = time.monotonic()
            own.close()
        except InferenceServerException as e:  # pragma: no cover - reported below
            result["e"] = e

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.1)
    c.unregister_system_shared_memory("busy")  # answered at once: the request holds the mapping
    unregistered = time.monotonic()
    assert status_of(module, c) == []
    thread.join(30)
    assert "e" not in result, str(result.get("e"))
    # The request was still running when its region was unregistered, and it completed.
    assert result["done"] > unregistered
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 4],
                                                            offset=16), x)
    expect_error(lambda: shm_infer(module, c, "slow", x, "busy", "busy", 16, out_offset=16),
                 "Unable to find shared memory region: 'busy'")
    good_request(module, c, regions)


def test_grpc_stream_with_shared_memory(farm, regions):
    """ModelStreamInfer with inputs and outputs in regions: each of 32 requests reads its own
    slice and writes its own place; one naming an unknown region fails alone."""
    import queue

    c = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    rows = 32
    x = np.random.default_rng(5).standard_normal((rows, 1, 8)).astype(np.float32)
    handle = regions("stream", 2 * x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("stream", key("stream"), 2 * x.nbytes)
    answers: "queue.Queue" = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(rows + 1):
            region = "stream" if i < rows else "missing"
            inputs = [grpcclient.InferInput("INPUT__0", [1, 8], "FP32")]
            inputs[0].set_shared_memory(region, 32, offset=32 * (i % rows))
            outputs = [grpcclient.InferRequestedOutput("OUTPUT__0")]
            outputs[0].set_shared_memory(region, 32, offset=x.nbytes + 32 * (i % rows))
            c.async_stream_infer("identity_float32", inputs, request_id=str(i), outputs=outputs)
        errors = []
        for _ in range(rows + 1):
            result, error = answers.get(timeout=60)
            if error is not None:
                errors.append(str(error))
    finally:
        c.stop_stream()
    assert len(errors) == 1 and "Unable to find shared memory region: 'missing'" in errors[0], \
        errors
    y = shm.get_contents_as_numpy(handle, np.float32, [rows, 1, 8], offset=x.nbytes)
    np.testing.assert_array_equal(y, x)
    c.unregister_system_shared_memory()
    c.close()
