"""Triton's model repository and logging extensions as a tritonclient user calls them (issue 30):
the index, load and unload over HTTP and gRPC on a farm with "frontend": {"model_control": true},
while another client keeps inferring on another model with no error; hostile names and bodies;
the log settings; and the refusals on the session farm, which leaves model_control and
log_control off (conftest.py).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import _admin, _bin_dir, _free_port

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
requests = pytest.importorskip("requests")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def control_farm():
    """A farm of its own: mlp (always loaded) and add2 / identity, which the tests load and
    unload; model_control on."""
    bin_dir = _bin_dir()
    scratch = Path(tempfile.mkdtemp(prefix="tf-repo-", dir="/tmp"))
    models = scratch / "models"
    subprocess.run([str(bin_dir / "torchfarm-mkmodel"), "--all", str(models)], check=True,
                   stdout=subprocess.DEVNULL)

    def model(name, path, inputs, **extra):
        return {"name": name, "path": str(models / path), "inputs": inputs,
                "instances": [{"device": "cpu", "count": 1, "threads": 1}], **extra}

    config = {
        "endpoint": f"ipc://{scratch}/jobs.sock", "admin_endpoint": f"ipc://{scratch}/admin.sock",
        "run_dir": str(scratch / "run"), "heartbeat_ms": 200,
        "http_endpoint": f"127.0.0.1:{_free_port()}", "grpc_endpoint": f"127.0.0.1:{_free_port()}",
        "frontend": {"model_control": True, "log_control": True},
        "models": [
            model("mlp", "mlp.pt", [{"dtype": "float32", "shape": [-1, 256]}], max_batch_size=8),
            model("add2", "add2.pt", [{"name": "x", "dtype": "float32", "shape": [-1, 3]},
                                      {"name": "y", "dtype": "float32", "shape": [-1, 3]}]),
        ],
    }
    config_path = scratch / "config.json"
    config_path.write_text(json.dumps(config))
    log_path = scratch / "supervisor.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(bin_dir / "torchfarm-supervisor"), "--config",
                                    str(config_path), "--drain-timeout-ms", "1000"],
                                   stderr=log, stdout=log)
    try:
        give_up = time.monotonic() + 90
        while True:
            assert process.poll() is None, log_path.read_text()
            health = _admin(config["admin_endpoint"], "health")
            if health and health.get("ready"):
                break
            assert time.monotonic() < give_up, log_path.read_text()
            time.sleep(0.1)
        yield config, scratch, models
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.returncode != 0:
            print(log_path.read_text())
        shutil.rmtree(scratch, ignore_errors=True)


def index_states(client, name):
    entries = client.get_model_repository_index()
    if not isinstance(entries, list):  # gRPC: the message as JSON
        entries = client.get_model_repository_index(as_json=True).get("models", [])
    return sorted(e.get("state", "") for e in entries if e["name"] == name)


def add2_result(client, module, rows=2):
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    y = np.ones((rows, 3), dtype=np.float32)
    inputs = [module.InferInput("x", [rows, 3], "FP32"), module.InferInput("y", [rows, 3], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    result = client.infer("add2", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x + 2 * y)


class Inferrer(threading.Thread):
    """Keeps inferring mlp over gRPC; counts answers and errors."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.stop, self.ok, self.errors = url, threading.Event(), 0, []

    def run(self):
        client = grpcclient.InferenceServerClient(url=self.url)
        x = np.full((1, 256), 0.5, dtype=np.float32)
        reference = None
        while not self.stop.is_set():
            inputs = [grpcclient.InferInput("INPUT__0", [1, 256], "FP32")]
            inputs[0].set_data_from_numpy(x)
            try:
                out = client.infer("mlp", inputs, client_timeout=30).as_numpy("OUTPUT__0")
                if reference is None:
                    reference = out
                elif not np.array_equal(out, reference):
                    self.errors.append("a different answer")
                self.ok += 1
            except InferenceServerException as e:
                self.errors.append(str(e))
        client.close()


def test_load_and_unload_while_another_model_serves(control_farm):
    config, _, _ = control_farm
    http = httpclient.InferenceServerClient(url=config["http_endpoint"])
    grpc = grpcclient.InferenceServerClient(url=config["grpc_endpoint"])
    assert "model_repository" in http.get_server_metadata()["extensions"]
    assert "model_repository" in grpc.get_server_metadata().extensions
    inferrer = Inferrer(config["grpc_endpoint"])
    inferrer.start()
    try:
        for cycle in range(2):
            for client, module in ((http, httpclient), (grpc, grpcclient)):
                assert index_states(client, "add2") == ["READY"]
                client.unload_model("add2")  # returns once its workers are gone
                assert not client.is_model_ready("add2")
                assert index_states(client, "add2") == ["UNAVAILABLE"]
                with pytest.raises(InferenceServerException, match="not served"):
                    add2_result(client, module)
                client.unload_model("add2")  # known and not loaded: nothing to do
                client.load_model("add2")  # returns once it serves
                assert client.is_model_ready("add2")
                add2_result(client, module)
                client.load_model("add2")  # loaded already: as Triton, no error
    finally:
        inferrer.stop.set()
        inferrer.join(timeout=60)
    assert inferrer.errors == [] and inferrer.ok > 0
    # Every configured model is in the index, with Triton's states.
    index = {e["name"]: e for e in http.get_model_repository_index()}
    assert index["mlp"]["state"] == "READY" and index["mlp"]["version"] == "1"
    ready = requests.post(f"http://{config['http_endpoint']}/v2/repository/index",
                          json={"ready": True}, timeout=10).json()
    assert {e["name"] for e in ready} == {"mlp", "add2"}
    http.close()
    grpc.close()


def test_hostile_repository_calls_then_a_good_one(control_farm):
    config, _, _ = control_farm
    base = f"http://{config['http_endpoint']}/v2/repository"
    grpc = grpcclient.InferenceServerClient(url=config["grpc_endpoint"])
    # (requests itself resolves a bare "..": the encoded one reaches the farm.)
    for name in ("a..b", "a%2Fb", "%2E%2E", "%2e%2e", ""):
        reply = requests.post(f"{base}/models/{name}/load", timeout=10)
        assert reply.status_code == 400, (name, reply.text)
        assert "not a path" in reply.json()["error"] or "empty" in reply.json()["error"]
    for name in ("../mlp", "a/b", "x" * 300):
        with pytest.raises(InferenceServerException, match="INVALID|not a path|expected"):
            grpc.load_model(name)
    with pytest.raises(InferenceServerException, match="not in the farm's config"):
        grpc.load_model("no_such_model")
    reply = requests.post(f"{base}/models/no_such_model/load", timeout=10)
    assert reply.status_code == 404, reply.text
    reply = requests.post(f"{base}/models/no_such_model/unload", timeout=10)
    assert reply.status_code == 404, reply.text
    for body in (b"{", b"[]", b'{"ready": 1}', b"\xff" * 100, b"[" * 100000, b"x" * 100000):
        reply = requests.post(f"{base}/index", data=body, timeout=10)
        assert reply.status_code == 400, (body[:10], reply.text)
    for body in (b'{"parameters": 3}', b'{"parameters": {"config": "{}"}}',
                 b'{"parameters": {"file:1/model.pt": "AAAA"}}', b"{"):
        reply = requests.post(f"{base}/models/add2/load", data=body, timeout=10)
        assert reply.status_code == 400, (body, reply.text)
    with pytest.raises(InferenceServerException, match="parameters.config"):
        grpc.load_model("add2", config="{}")
    reply = requests.get(f"{base}/index", timeout=10)
    assert reply.status_code == 405
    # And a good request still succeeds.
    reply = requests.post(f"{base}/models/add2/load", data=b'{"parameters": {}}', timeout=60)
    assert reply.status_code == 200, reply.text
    assert grpc.is_model_ready("add2")
    grpc.close()


def test_session_farm_refuses_load_and_says_which_key(farm):
    client = httpclient.InferenceServerClient(url=farm.http_endpoint)
    with pytest.raises(InferenceServerException, match="model_control"):
        client.unload_model("mlp")
    assert client.is_model_ready("mlp")
    names = {e["name"] for e in client.get_model_repository_index()}
    assert {"mlp", "add2"} <= names
    grpc = grpcclient.InferenceServerClient(url=farm.grpc_endpoint)
    with pytest.raises(InferenceServerException, match="model_control"):
        grpc.load_model("mlp")
    assert {"mlp", "add2"} <= {m.name for m in grpc.get_model_repository_index().models}
    client.close()
    grpc.close()


def test_log_settings_read_set_and_hostile(control_farm, farm):
    config, _, _ = control_farm
    http = httpclient.InferenceServerClient(url=config["http_endpoint"])
    grpc = grpcclient.InferenceServerClient(url=config["grpc_endpoint"])
    settings = http.get_log_settings()
    assert settings["log_info"] is True and settings["log_verbose_level"] == 0
    assert "logging" in http.get_server_metadata()["extensions"]
    assert http.update_log_settings({"log_info": False})["log_info"] is False
    got = grpc.get_log_settings(as_json=True)["settings"]
    assert got["log_info"]["bool_param"] is False and got["log_warning"]["bool_param"] is True
    grpc.update_log_settings({"log_verbose_level": 1})
    assert http.get_log_settings()["log_verbose_level"] == 1
    base = f"http://{config['http_endpoint']}/v2/logging"
    for body in (b"{", b"[]", b'{"log_info": 1}', b'{"log_error": false}', b'{"log_file": "/tmp/x"}',
                 b'{"log_format": "ISO8601"}', b'{"log_verbose_level": -1}', b'{"nope": true}'):
        reply = requests.post(base, data=body, timeout=10)
        assert reply.status_code == 400, (body, reply.text)
    with pytest.raises(InferenceServerException, match="log_file"):
        grpc.update_log_settings({"log_file": "/etc/passwd"})
    # A good one after them: back to info.
    back = http.update_log_settings({"log_verbose_level": 0, "log_info": True})
    assert back["log_info"] is True and back["log_verbose_level"] == 0
    assert requests.delete(base, timeout=10).status_code == 405
    # The session farm keeps log_control off: reading works, changing is refused naming the key.
    session = httpclient.InferenceServerClient(url=farm.http_endpoint)
    assert session.get_log_settings()["log_error"] is True
    with pytest.raises(InferenceServerException, match="log_control"):
        session.update_log_settings({"log_info": False})
    session.close()
    http.close()
    grpc.close()
