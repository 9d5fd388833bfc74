"""A Triton user's client code against torchfarm, unchanged (issue 30): NVIDIA's tritonclient over
HTTP and gRPC (sync and asyncio), and the raw body KServe's REST client sends.

Runs on the session farm of conftest.py (its `add2` model: sum = x + 2 * y, float32 [-1, 3]; its
`identity_float32`). Each call is written as tritonclient's documentation writes it; results are
compared with numpy.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
requests = pytest.importorskip("requests")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def http_client(farm):
    client = httpclient.InferenceServerClient(url=farm.http_endpoint)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc_client(farm):
    client = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    yield client
    client.close()


def add2_inputs(module, rows: int = 4, seed: int = 3, binary: bool = True):
    """The add2 inputs as tritonclient builds them, and numpy's sum = x + 2 * y."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 3)).astype(np.float32)
    y = rng.standard_normal((rows, 3)).astype(np.float32)
    inputs = [module.InferInput("x", list(x.shape), "FP32"),
              module.InferInput("y", list(y.shape), "FP32")]
    if module is httpclient:
        inputs[0].set_data_from_numpy(x, binary_data=binary)
        inputs[1].set_data_from_numpy(y, binary_data=binary)
    else:
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(y)
    return inputs, x + 2 * y


# --- item 4: readiness of an unknown model is False, not an exception ---------------------------

def test_is_model_ready_of_an_unknown_model_is_false(http_client, grpc_client):
    assert http_client.is_model_ready("add2")
    assert grpc_client.is_model_ready("add2")
    assert not http_client.is_model_ready("no_such_model")
    assert not grpc_client.is_model_ready("no_such_model")  # Triton: False; raised before
    assert not grpc_client.is_model_ready("add2", model_version="99")
    # Metadata still says why, in the words every endpoint uses.
    with pytest.raises(InferenceServerException, match="is not served here"):
        grpc_client.get_model_metadata("no_such_model")
    with pytest.raises(InferenceServerException, match="is not served here"):
        http_client.get_model_metadata("no_such_model")


# --- item 5: metadata lists the outputs at ready, learned by a dry run at load --------------------

def test_metadata_has_outputs_at_ready_without_a_request(farm, http_client, grpc_client):
    # Nothing infers probed_* in this session: the outputs come from the worker's dry run.
    mlp = http_client.get_model_metadata("probed_mlp")
    assert mlp["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 128]}]
    grpc_mlp = grpc_client.get_model_metadata("probed_mlp")
    assert [(o.name, o.datatype, list(o.shape)) for o in grpc_mlp.outputs] == \
        [("OUTPUT__0", "FP32", [-1, 128])]
    # A variable input dim gives a variable output dim (two dry runs at different sizes).
    identity = http_client.get_model_metadata("probed_identity")
    assert identity["outputs"] == [{"name": "OUTPUT__0", "datatype": "INT32", "shape": [-1, -1]}]
    grpc_identity = grpc_client.get_model_metadata("probed_identity")
    assert [list(o.shape) for o in grpc_identity.outputs] == [[-1, -1]]
    config = http_client.get_model_config("probed_mlp")
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == \
        [("OUTPUT__0", "TYPE_FP32", [128])]
    stats = http_client.get_inference_statistics("probed_mlp")["model_stats"][0]
    assert stats["execution_count"] == 0  # the dry run is not a request


# --- items 1 and 7: priority as tritonclient sends it ---------------------------------------------

@pytest.mark.parametrize("priority", [0, 1, 2, 2**40])
def test_infer_with_priority_http_and_grpc(http_client, grpc_client, priority):
    for client, module in ((http_client, httpclient), (grpc_client, grpcclient)):
        inputs, expected = add2_inputs(module)
        result = client.infer("add2", inputs, outputs=[module.InferRequestedOutput("sum")],
                              priority=priority, timeout=5_000_000)
        np.testing.assert_array_equal(result.as_numpy("sum"), expected)


# --- item 2: KServe's REST client always sends "model_name" ---------------------------------------

def test_kserve_style_body_with_model_name_infers(farm):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), dtype=np.float32)
    body = {"model_name": "add2", "model_version": "", "id": "kserve-1",
            "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": x.ravel().tolist()},
                       {"name": "y", "shape": [2, 3], "datatype": "FP32", "data": y.ravel().tolist()}]}
    reply = requests.post(f"http://{farm.http_endpoint}/v2/models/add2/infer", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["id"] == "kserve-1"
    out = np.array(answer["outputs"][0]["data"], dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(out, x + 2 * y)
    # The keys the farm uses keep their checks.
    body["inputs"] = "not a list"
    reply = requests.post(f"http://{farm.http_endpoint}/v2/models/add2/infer", json=body, timeout=10)
    assert reply.status_code == 400 and "inputs" in reply.json()["error"]


# --- item 3: compressed request bodies ------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False])
def test_compressed_http_request_equals_numpy(http_client, algorithm, binary):
    inputs, expected = add2_inputs(httpclient, rows=64, seed=11, binary=binary)
    result = http_client.infer("add2", inputs, request_compression_algorithm=algorithm,
                               outputs=[httpclient.InferRequestedOutput("sum", binary_data=binary)])
    np.testing.assert_array_equal(result.as_numpy("sum"), expected)


def test_hostile_compressed_bodies_then_a_good_one(farm, http_client):
    import gzip
    url = f"http://{farm.http_endpoint}/v2/models/add2/infer"
    bomb = gzip.compress(b" " * (80 << 20))  # past the default 64 MiB max_body_bytes
    reply = requests.post(url, data=bomb, headers={"Content-Encoding": "gzip"}, timeout=30)
    assert reply.status_code == 413, reply.text
    assert "max_body_bytes" in reply.json()["error"]
    truncated = gzip.compress(b'{"inputs": []}')[:-6]
    reply = requests.post(url, data=truncated, headers={"Content-Encoding": "gzip"}, timeout=10)
    assert reply.status_code == 400, reply.text
    reply = requests.post(url, data=b"{}", headers={"Content-Encoding": "br"}, timeout=10)
    assert reply.status_code == 415 and "'br'" in reply.json()["error"]
    inputs, expected = add2_inputs(httpclient)
    result = http_client.infer("add2", inputs, request_compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("sum"), expected)


def test_grpc_compressed_call_equals_numpy(grpc_client):
    inputs, expected = add2_inputs(grpcclient, rows=32)
    result = grpc_client.infer("add2", inputs, compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("sum"), expected)


# --- asyncio clients --------------------------------------------------------------------------------

def test_aio_clients_ready_and_infer(farm):
    http_aio = pytest.importorskip("tritonclient.http.aio")
    grpc_aio = pytest.importorskip("tritonclient.grpc.aio")

    async def run():
        for module, url in ((http_aio, farm.http_endpoint), (grpc_aio, farm.grpc_endpoint)):
            client = module.InferenceServerClient(url=url)
            try:
                assert await client.is_model_ready("add2")
                assert not await client.is_model_ready("no_such_model")
                base = httpclient if module is http_aio else grpcclient
                inputs, expected = add2_inputs(base)
                result = await client.infer("add2", inputs, priority=1)
                np.testing.assert_array_equal(result.as_numpy("sum"), expected)
            finally:
                await client.close()

    asyncio.run(run())


# --- item 6 (part): model configuration over HTTP and gRPC, advertised where it works ----------

def test_http_model_config_is_tritons_json(http_client, grpc_client):
    config = http_client.get_model_config("mlp")
    assert config["name"] == "mlp"
    assert config["platform"] == "pytorch_libtorch"
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "INPUT__0", "data_type": "TYPE_FP32",
                                "format": "FORMAT_NONE", "dims": [256]}]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 200
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert "model_configuration" in http_client.get_server_metadata()["extensions"]
    # gRPC: Triton's ModelConfig, the same configuration.
    assert "model_configuration" in grpc_client.get_server_metadata().extensions
    grpc_config = grpc_client.get_model_config("mlp", as_json=True)["config"]
    assert grpc_config["name"] == "mlp" and grpc_config["max_batch_size"] == 8
    assert grpc_config["input"][0]["data_type"] == "TYPE_FP32"
    assert [int(d) for d in grpc_config["input"][0]["dims"]] == [256]
    with pytest.raises(InferenceServerException, match="is not served here"):
        http_client.get_model_config("no_such_model")
    with pytest.raises(InferenceServerException, match="is not served here"):
        grpc_client.get_model_config("no_such_model")


# --- item 6 (part): model statistics over HTTP and gRPC ----------------------------------------

def test_http_model_statistics_count_what_ran(farm, http_client):
    def add2_stats():
        (entry,) = http_client.get_inference_statistics("add2")["model_stats"]
        return entry

    before = add2_stats()
    for _ in range(3):
        inputs, expected = add2_inputs(httpclient, rows=2)
        np.testing.assert_array_equal(http_client.infer("add2", inputs).as_numpy("sum"), expected)
    after = add2_stats()
    assert after["name"] == "add2" and after["version"] == "1"
    success = after["inference_stats"]["success"]["count"]
    assert success >= before["inference_stats"]["success"]["count"] + 3
    assert after["inference_count"] >= before["inference_count"] + 6  # rows
    assert after["execution_count"] > before["execution_count"]
    assert after["inference_stats"]["compute_infer"]["ns"] > 0
    assert after["last_inference"] > 1_600_000_000_000  # ms since the epoch
    # Every model's statistics, and no "model 'stats' is not served".
    reply = requests.get(f"http://{farm.http_endpoint}/v2/models/stats", timeout=10)
    assert reply.status_code == 200, reply.text
    names = {entry["name"] for entry in reply.json()["model_stats"]}
    assert {"add2", "mlp"} <= names
    assert "statistics" in http_client.get_server_metadata()["extensions"]
    with pytest.raises(InferenceServerException, match="is not served here"):
        http_client.get_inference_statistics("no_such_model")


def test_grpc_model_statistics(grpc_client):
    inputs, expected = add2_inputs(grpcclient, rows=2)
    np.testing.assert_array_equal(grpc_client.infer("add2", inputs).as_numpy("sum"), expected)
    stats = grpc_client.get_inference_statistics("add2", as_json=True)["model_stats"]
    assert len(stats) == 1 and stats[0]["name"] == "add2"
    assert int(stats[0]["inference_stats"]["success"]["count"]) >= 1
    assert "statistics" in grpc_client.get_server_metadata().extensions
    everything = grpc_client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"add2", "mlp"} <= {entry["name"] for entry in everything}


# --- item 6 (part): gRPC streaming (ModelStreamInfer) -------------------------------------------

def test_grpc_stream_of_1000_requests_with_64_in_flight(farm):
    import queue
    import threading

    client = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    answers: "queue.Queue" = queue.Queue()
    window = threading.Semaphore(64)

    def callback(result, error):
        answers.put((result, error))
        window.release()

    client.start_stream(callback=callback)
    expected = {}
    bad = 500
    try:
        for i in range(1000):
            window.acquire()
            if i == bad:  # wrong width: this one fails, the stream goes on
                x = np.zeros((1, 4), dtype=np.float32)
                inputs = [grpcclient.InferInput("x", [1, 4], "FP32"),
                          grpcclient.InferInput("y", [1, 4], "FP32")]
                inputs[0].set_data_from_numpy(x)
                inputs[1].set_data_from_numpy(x)
            else:
                inputs, expected[str(i)] = add2_inputs(grpcclient, rows=1 + i % 4, seed=i)
            client.async_stream_infer("add2", inputs, request_id=str(i),
                                      outputs=[grpcclient.InferRequestedOutput("sum")])
        got, errors = {}, []
        for _ in range(1000):
            result, error = answers.get(timeout=60)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy("sum")
    finally:
        client.stop_stream()
        client.close()
    assert len(errors) == 1 and "shape" in errors[0], errors
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value)


def test_grpc_stream_hostile_requests_then_a_good_one(farm):
    import queue

    client = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    answers: "queue.Queue" = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        x = np.zeros((1, 3), dtype=np.float32)
        good, _ = add2_inputs(grpcclient, rows=1)
        lying = [grpcclient.InferInput("x", [1, 3], "FP32"),
                 grpcclient.InferInput("y", [1, 3], "FP32")]
        lying[0].set_data_from_numpy(x)
        lying[1].set_data_from_numpy(x)
        lying[0]._input.shape[:] = [1000, 3]  # says 1,000 rows, carries one
        client.async_stream_infer("add2", lying, request_id="lying")
        client.async_stream_infer("no_such_model", good, request_id="unknown")
        wrong_type = [grpcclient.InferInput("x", [1, 3], "FP32")]
        wrong_type[0].set_data_from_numpy(x)
        wrong_type[0]._input.datatype = "FP33"
        client.async_stream_infer("add2", wrong_type, request_id="type")
        errors = [answers.get(timeout=30)[1] for _ in range(3)]
        assert all(e is not None for e in errors), errors
        text = " ".join(str(e) for e in errors)
        assert "not served here" in text and "FP33" in text
        inputs, expected = add2_inputs(grpcclient, rows=3)
        client.async_stream_infer("add2", inputs, request_id="good")
        result, error = answers.get(timeout=30)
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("sum"), expected)
    finally:
        client.stop_stream()
        client.close()


# --- item 6 (part): classification (class_count) as Triton's "score:index" BYTES ---------------

def test_classification_top_k_http_and_grpc(http_client, grpc_client):
    for client, module in ((http_client, httpclient), (grpc_client, grpcclient)):
        for binary in ((True, False) if module is httpclient else (True,)):
            inputs, expected = add2_inputs(module, rows=3, seed=7)
            kwargs = {"binary_data": binary} if module is httpclient else {}
            result = client.infer("add2", inputs, outputs=[
                module.InferRequestedOutput("sum", class_count=2, **kwargs)])
            top = result.as_numpy("sum")
            assert top.shape == (3, 2)
            for row, values in enumerate(expected):
                order = sorted(range(3), key=lambda i: (-values[i], i))[:2]
                want = [f"{values[i]:f}:{i}" for i in order]
                got = [t.decode() if isinstance(t, bytes) else str(t) for t in top[row]]
                assert got == want, (module.__name__, binary, got, want)
    assert "classification" in http_client.get_server_metadata()["extensions"]
    # Hostile class counts, then a good request.
    inputs, _ = add2_inputs(httpclient)
    for count in (-3, -1):
        with pytest.raises(InferenceServerException, match="classification"):
            http_client.infer("add2", inputs, outputs=[
                httpclient.InferRequestedOutput("sum", class_count=count)])
    result = http_client.infer("add2", inputs, outputs=[httpclient.InferRequestedOutput("sum")])
    assert result.as_numpy("sum").dtype == np.float32
