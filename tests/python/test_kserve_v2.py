"""The Open Inference Protocol (KServe v2) front ends against a real farm, as a user of `requests`
and `grpcio` would call them (docs/kserve-v2.md). conftest.py's farm serves both: http_endpoint
and grpc_endpoint on loopback ports. The gRPC stubs are generated here, at test time, from the
checked-in proto/grpc_predict_v2.proto with protoc and grpc_python_plugin, into a temp folder.

Every answer is held against the ZeroMQ path (the torchfarm client) bit for bit.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import torchfarm
from conftest import IDENTITY_DTYPES, REPO, random_array

grpc = pytest.importorskip("grpc")
requests = pytest.importorskip("requests")

RNG = np.random.default_rng(17)

# numpy name -> v2 datatype
V2_NAMES = {"float32": "FP32", "float64": "FP64", "float16": "FP16", "int64": "INT64",
            "int32": "INT32", "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}
NUMPY_NAMES = {v: k for k, v in V2_NAMES.items()}


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def pb():
    """(grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc) generated from proto/ into a temp dir."""
    # tritonclient.grpc (test_triton_compat.py, imported at collection) registers Triton's
    # grpc_service.proto: a superset of KServe's in the same package, which one process cannot
    # load twice. Its messages and service carry the same names, so they stand in then.
    from google.protobuf import descriptor_pool
    try:
        descriptor_pool.Default().FindMessageTypeByName("inference.ServerLiveRequest")
    except KeyError:
        pass
    else:
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        yield (service_pb2, service_pb2_grpc)
        return
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    if protoc is None or not Path(plugin).exists():
        pytest.skip("protoc and grpc_python_plugin are needed (apt-get install protobuf-compiler "
                    "protobuf-compiler-grpc)")
    out = Path(tempfile.mkdtemp(prefix="tf-v2-stubs-"))
    try:
        subprocess.run([protoc, f"-I{REPO / 'proto'}", f"--python_out={out}",
                        f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}",
                        "grpc_predict_v2.proto"], check=True)
        sys.path.insert(0, str(out))
        try:
            yield (importlib.import_module("grpc_predict_v2_pb2"),
                   importlib.import_module("grpc_predict_v2_pb2_grpc"))
        finally:
            sys.path.remove(str(out))
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def stub(farm, pb):
    channel = grpc.insecure_channel(farm.grpc_endpoint)
    grpc.channel_ready_future(channel).result(timeout=10)
    yield pb[1].GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def base(farm):
    return f"http://{farm.http_endpoint}"


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:  # keep-alive, as a real client would
        yield session


@pytest.fixture(scope="module")
def zmq_client(farm):
    with torchfarm.Client(farm.endpoint, timeout=10) as client:
        yield client


def _raw_request(pb2, model, *arrays, names=None, **fields):
    request = pb2.ModelInferRequest(model_name=model, **fields)
    for i, array in enumerate(arrays):
        request.inputs.add(name=names[i] if names else f"INPUT__{i}",
                           datatype=V2_NAMES[array.dtype.name], shape=list(array.shape))
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    return request


def _grpc_outputs(response):
    return [np.frombuffer(raw, dtype=NUMPY_NAMES[out.datatype]).reshape(tuple(out.shape))
            for out, raw in zip(response.outputs, response.raw_output_contents)]


# ---------------------------------------------------------------------------------------------
# HTTP (requests)


def test_http_health_and_server_metadata(base, http):
    assert http.get(f"{base}/v2/health/live", timeout=5).status_code == 200
    assert http.get(f"{base}/v2/health/ready", timeout=5).status_code == 200
    reply = http.get(f"{base}/v2", timeout=5)
    assert reply.status_code == 200
    assert reply.json()["name"] == "torchfarm"


def test_http_model_metadata_and_ready(base, http):
    reply = http.get(f"{base}/v2/models/identity_float32", timeout=5)
    assert reply.status_code == 200, reply.text
    meta = reply.json()
    assert meta["name"] == "identity_float32"
    assert meta["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, -1]}]
    version = meta["versions"][0]
    assert http.get(f"{base}/v2/models/identity_float32/versions/{version}",
                    timeout=5).json() == meta
    assert http.get(f"{base}/v2/models/identity_float32/ready", timeout=5).status_code == 200
    pair = http.get(f"{base}/v2/models/pair", timeout=5).json()
    assert [i["name"] for i in pair["inputs"]] == ["INPUT__0", "INPUT__1"]


@pytest.mark.parametrize("dtype", IDENTITY_DTYPES)
def test_http_json_infer_equals_zeromq(base, http, zmq_client, dtype):
    x = random_array(RNG, dtype)
    body = {"id": "j1", "inputs": [{"name": "INPUT__0", "shape": list(x.shape),
                                    "datatype": V2_NAMES[dtype], "data": x.ravel().tolist()}]}
    reply = http.post(f"{base}/v2/models/identity_{dtype}/infer", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert result["id"] == "j1" and result["model_name"] == f"identity_{dtype}"
    (out,) = result["outputs"]
    assert out["datatype"] == V2_NAMES[dtype] and out["shape"] == list(x.shape)
    y = np.array(out["data"], dtype=dtype).reshape(out["shape"])
    (expected,) = zmq_client.infer(f"identity_{dtype}", x)
    assert y.tobytes() == expected.tobytes() == x.tobytes()


def test_http_binary_extension_equals_zeromq(base, http, zmq_client):
    a = random_array(RNG, "float32", (4, 5))
    b = random_array(RNG, "float32", (4, 5))
    # Named inputs in the other order: the farm puts them in the model's.
    header = {"inputs": [
        {"name": "INPUT__1", "shape": [4, 5], "datatype": "FP32",
         "parameters": {"binary_data_size": b.nbytes}},
        {"name": "INPUT__0", "shape": [4, 5], "datatype": "FP32",
         "parameters": {"binary_data_size": a.nbytes}}],
        "outputs": [{"name": "OUTPUT__1", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT__0", "parameters": {"binary_data": True}}]}
    head = json.dumps(header).encode()
    reply = http.post(f"{base}/v2/models/pair/infer", data=head + b.tobytes() + a.tobytes(),
                      headers={"Inference-Header-Content-Length": str(len(head)),
                               "Content-Type": "application/octet-stream"}, timeout=10)
    assert reply.status_code == 200, reply.text
    json_length = int(reply.headers["Inference-Header-Content-Length"])
    result = json.loads(reply.content[:json_length])
    tail = reply.content[json_length:]
    outputs = {}
    for out in result["outputs"]:
        size = out["parameters"]["binary_data_size"]
        outputs[out["name"]] = np.frombuffer(tail[:size], dtype=np.float32).reshape(out["shape"])
        tail = tail[size:]
    assert [o["name"] for o in result["outputs"]] == ["OUTPUT__1", "OUTPUT__0"]
    total, product = zmq_client.infer("pair", a, b)
    assert outputs["OUTPUT__0"].tobytes() == total.tobytes()
    assert outputs["OUTPUT__1"].tobytes() == product.tobytes()


@pytest.mark.parametrize("path,body,status", [
    ("/v2/models/nope/infer",
     {"inputs": [{"name": "INPUT__0", "shape": [1], "datatype": "FP32", "data": [1]}]}, 404),
    ("/v2/models/identity_float32/infer",
     {"inputs": [{"name": "INPUT__0", "shape": [2], "datatype": "FP33", "data": [1, 2]}]}, 400),
    ("/v2/models/identity_float32/infer",
     {"inputs": [{"name": "INPUT__0", "shape": [3], "datatype": "FP32", "data": [1, 2]}]}, 400),
    ("/v2/models/identity_float32/infer", b"{not json", 400),
])
def test_http_errors_carry_the_farm_status(base, http, path, body, status):
    if isinstance(body, bytes):
        reply = http.post(f"{base}{path}", data=body,
                          headers={"Content-Type": "application/json"}, timeout=5)
    else:
        reply = http.post(f"{base}{path}", json=body, timeout=5)
    assert reply.status_code == status, reply.text
    assert isinstance(reply.json()["error"], str) and reply.json()["error"]


def test_http_unknown_model_metadata_is_404(base, http):
    reply = http.get(f"{base}/v2/models/nope", timeout=5)
    assert reply.status_code == 404
    assert "error" in reply.json()


# ---------------------------------------------------------------------------------------------
# gRPC (grpcio + generated stubs)


def test_grpc_health_and_server_metadata(stub, pb):
    pb2 = pb[0]
    assert stub.ServerLive(pb2.ServerLiveRequest(), timeout=5).live
    assert stub.ServerReady(pb2.ServerReadyRequest(), timeout=5).ready
    assert stub.ModelReady(pb2.ModelReadyRequest(name="identity_float32"), timeout=5).ready
    meta = stub.ServerMetadata(pb2.ServerMetadataRequest(), timeout=5)
    assert meta.name == "torchfarm" and meta.version


def test_grpc_model_metadata(stub, pb):
    meta = stub.ModelMetadata(pb[0].ModelMetadataRequest(name="pair"), timeout=5)
    assert meta.name == "pair" and len(meta.versions) >= 1
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT__0", "FP32", [-1, 5]), ("INPUT__1", "FP32", [-1, 5])]


@pytest.mark.parametrize("dtype", IDENTITY_DTYPES)
def test_grpc_raw_infer_equals_zeromq(stub, pb, zmq_client, dtype):
    x = random_array(RNG, dtype)
    response = stub.ModelInfer(_raw_request(pb[0], f"identity_{dtype}", x, id="g1"), timeout=10)
    assert response.id == "g1" and response.model_name == f"identity_{dtype}"
    (y,) = _grpc_outputs(response)
    (expected,) = zmq_client.infer(f"identity_{dtype}", x)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == expected.tobytes() == x.tobytes()


def test_grpc_typed_contents(stub, pb):
    pb2 = pb[0]
    x = random_array(RNG, "float32", (2, 3))
    request = pb2.ModelInferRequest(model_name="identity_float32")
    request.inputs.add(name="INPUT__0", datatype="FP32", shape=[2, 3],
                       contents=pb2.InferTensorContents(fp32_contents=x.ravel().tolist()))
    i = np.array([[-(2 ** 40), 3]], dtype=np.int64)
    request64 = pb2.ModelInferRequest(model_name="identity_int64")
    request64.inputs.add(name="INPUT__0", datatype="INT64", shape=[1, 2],
                         contents=pb2.InferTensorContents(int64_contents=i.ravel().tolist()))
    (y,) = _grpc_outputs(stub.ModelInfer(request, timeout=10))
    (j,) = _grpc_outputs(stub.ModelInfer(request64, timeout=10))
    assert y.tobytes() == x.tobytes()
    assert j.tobytes() == i.tobytes()


def test_grpc_named_inputs_in_any_order_and_output_subset(stub, pb, zmq_client):
    a = random_array(RNG, "float32", (3, 5))
    b = random_array(RNG, "float32", (3, 5))
    request = _raw_request(pb[0], "pair", b, a, names=["INPUT__1", "INPUT__0"])
    request.outputs.add(name="OUTPUT__1")
    response = stub.ModelInfer(request, timeout=10)
    assert [o.name for o in response.outputs] == ["OUTPUT__1"]
    (product,) = _grpc_outputs(response)
    _, expected = zmq_client.infer("pair", a, b)
    assert product.tobytes() == expected.tobytes()


def _code(call):
    with pytest.raises(grpc.RpcError) as error:
        call()
    return error.value.code(), error.value.details()


def test_grpc_errors_carry_the_farm_code(stub, pb):
    pb2 = pb[0]
    x = random_array(RNG, "float32")
    code, details = _code(lambda: stub.ModelInfer(_raw_request(pb2, "nope", x), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND and "identity_float32" in details
    bad = _raw_request(pb2, "identity_float32", x)
    bad.raw_input_contents[0] = bad.raw_input_contents[0][:-1]
    assert _code(lambda: stub.ModelInfer(bad, timeout=5))[0] == grpc.StatusCode.INVALID_ARGUMENT
    wrong = _raw_request(pb2, "identity_float32", x)
    wrong.inputs[0].datatype = "BYTES"
    assert _code(lambda: stub.ModelInfer(wrong, timeout=5))[0] == grpc.StatusCode.INVALID_ARGUMENT
    # As Triton: an unknown model is not ready, not an error (issue 30 item 4).
    assert not stub.ModelReady(pb2.ModelReadyRequest(name="nope"), timeout=5).ready
    code, _ = _code(lambda: stub.ModelMetadata(pb2.ModelMetadataRequest(name="nope"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND


def test_grpc_timeout_parameter_expires_in_the_queue(stub, pb):
    pb2 = pb[0]
    # The slow model's one worker takes one request to run and one more into its ring; the third
    # waits in the queue. So with three ~0.2-0.5 s requests ahead of it, a request with a 50 ms
    # "timeout" parameter (µs, as Triton's) expires in the queue and never runs.
    busy = np.zeros((1, 4), dtype=np.float32)
    busy[0, 0] = 5000
    ahead = [stub.ModelInfer.future(_raw_request(pb2, "slow", busy), timeout=30)
             for _ in range(3)]
    time.sleep(0.1)
    quick = _raw_request(pb2, "slow", np.ones((1, 4), dtype=np.float32))
    quick.parameters["timeout"].int64_param = 50_000
    code, details = _code(lambda: stub.ModelInfer(quick, timeout=30))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED, details
    assert "timeout_ms" in details
    for future in ahead:
        assert future.result().raw_output_contents[0] == busy.tobytes()


def test_grpc_oversized_message_is_refused(stub, pb):
    pb2 = pb[0]
    big = np.zeros((1, (64 << 20) // 4 + 1024), dtype=np.float32)  # over frontend.max_body_bytes
    code, _ = _code(lambda: stub.ModelInfer(_raw_request(pb2, "identity_float32", big),
                                            timeout=30))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_http_and_grpc_agree(base, http, stub, pb):
    x = random_array(RNG, "int32", (2, 2))
    (via_grpc,) = _grpc_outputs(stub.ModelInfer(_raw_request(pb[0], "identity_int32", x),
                                                timeout=10))
    body = {"inputs": [{"name": "INPUT__0", "shape": [2, 2], "datatype": "INT32",
                        "data": x.ravel().tolist()}]}
    out = http.post(f"{base}/v2/models/identity_int32/infer", json=body,
                    timeout=10).json()["outputs"][0]
    assert np.array(out["data"], dtype=np.int32).reshape(out["shape"]).tobytes() == \
        via_grpc.tobytes()
