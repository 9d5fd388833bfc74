"""Starts one real torchfarm farm for the Python client tests (session scope).

The binaries come from $TORCHFARM_BIN_DIR (set by ctest to <build>/bin; default: build/bin of the
repository). The farm gets a scratch folder under /tmp holding the models written by
torchfarm-mkmodel, the config, the ipc sockets and the run_dir; it is stopped with SIGTERM at the
end of the session, and its log is printed when it did not stop cleanly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zmq

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python"))

# Each dtype gets its own identity model entry: a model declares one dtype per input.
IDENTITY_DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool", "float16"]


def random_array(rng: np.random.Generator, dtype: str, shape=(3, 5)) -> np.ndarray:
    """Random values of `dtype` over its whole range (floats: standard normal)."""
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@dataclass
class Farm:
    endpoint: str
    admin_endpoint: str
    model_dir: Path
    dir: Path
    http_endpoint: str = ""  # the Open Inference Protocol front ends (docs/kserve-v2.md)
    grpc_endpoint: str = ""


def _free_port() -> int:
    """A loopback TCP port nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin_dir() -> Path:
    return Path(os.environ.get("TORCHFARM_BIN_DIR", REPO / "build" / "bin"))


def _admin(endpoint: str, cmd: str, timeout_ms: int = 500):
    context = zmq.Context.instance()
    with context.socket(zmq.REQ) as socket:
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(endpoint)
        socket.send_json({"cmd": cmd})
        if not socket.poll(timeout_ms):
            return None
        return socket.recv_json()


def _config(scratch: Path, models: Path) -> dict:
    def model(name: str, path: str, inputs: list, **extra) -> dict:
        return {"name": name, "path": str(models / path), "inputs": inputs,
                "instances": [{"device": "cpu", "count": 1, "threads": 1}], **extra}

    entries = [model(f"identity_{d}", "identity.pt", [{"dtype": d, "shape": [-1, -1]}])
               for d in IDENTITY_DTYPES]
    entries += [
        model("pair", "pair.pt", [{"dtype": "float32", "shape": [-1, 5]}] * 2),
        model("mlp", "mlp.pt", [{"dtype": "float32", "shape": [-1, 256]}],
              max_batch_size=8, max_queue_delay_us=200),
        model("slow", "slow.pt", [{"dtype": "float32", "shape": [-1, 4]}]),
        # Inputs only, no warm-up, never inferred: their metadata lists the outputs the worker's
        # dry run at load found (test_triton_compat.py).
        model("probed_mlp", "mlp.pt", [{"dtype": "float32", "shape": [-1, 256]}],
              max_batch_size=8),
        model("probed_identity", "identity.pt", [{"dtype": "int32", "shape": [-1, -1]}]),
        model("add2", "add2.pt", [{"name": "x", "dtype": "float32", "shape": [-1, 3]},
                                  {"name": "y", "dtype": "float32", "shape": [-1, 3]}],
              outputs=[{"name": "sum", "dtype": "float32", "shape": [-1, 3]}]),
        # The worker's image pipeline (README, "Image pipelines"): JPEG bytes in, top 3 out.
        model("img", "convnet.pt", [{"dtype": "bytes", "shape": [-1]}],
              pipeline={"decode": {"format": "jpeg", "threads": 1},
                        "preprocess": str(models / "jpeg_pre.pt"),
                        "postprocess": str(models / "topk_post.pt")},
              outputs=[{"name": "probabilities", "dtype": "float32", "shape": [-1, 3]},
                       {"name": "classes", "dtype": "int64", "shape": [-1, 3]}],
              max_batch_size=4, max_queue_delay_us=1000),
    ]
    return {"endpoint": f"ipc://{scratch}/jobs.sock",
            "admin_endpoint": f"ipc://{scratch}/admin.sock", "run_dir": str(scratch / "run"),
            "http_endpoint": f"127.0.0.1:{_free_port()}",
            "grpc_endpoint": f"127.0.0.1:{_free_port()}",
            "heartbeat_ms": 200, "models": entries,
            # Triton's system shared memory extension, for loopback clients (test_triton_shm.py).
            "frontend": {"system_shared_memory": True}}


@pytest.fixture(scope="session")
def farm():
    bin_dir = _bin_dir()
    for binary in ("torchfarm-supervisor", "torchfarm-worker", "torchfarm-mkmodel"):
        if not (bin_dir / binary).exists():
            pytest.fail(f"{bin_dir / binary} not found: build first or set TORCHFARM_BIN_DIR")
    scratch = Path(tempfile.mkdtemp(prefix="tf-py-", dir="/tmp"))
    models = scratch / "models"
    subprocess.run([str(bin_dir / "torchfarm-mkmodel"), "--all", str(models)], check=True,
                   stdout=subprocess.DEVNULL)
    config = _config(scratch, models)
    (scratch / "config.json").write_text(json.dumps(config, indent=2))
    log_path = scratch / "supervisor.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(bin_dir / "torchfarm-supervisor"), "--config", str(scratch / "config.json"),
             "--drain-timeout-ms", "1000"], stderr=log, stdout=log)
    clean = False
    try:
        give_up = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"supervisor exited with {process.returncode}:\n{log_path.read_text()}")
            health = _admin(config["admin_endpoint"], "health")
            if health and health.get("ready"):
                break
            if time.monotonic() > give_up:
                pytest.fail(f"farm not ready in 90 s; last health {health}:\n"
                            f"{log_path.read_text()}")
            time.sleep(0.1)
        yield Farm(config["endpoint"], config["admin_endpoint"], models, scratch,
                   config["http_endpoint"], config["grpc_endpoint"])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            clean = process.wait(timeout=20) == 0
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if not clean:
            sys.stderr.write(f"---- supervisor.log (exit {process.returncode}) ----\n"
                             f"{log_path.read_text()}\n")
            # A supervisor that did not exit cleanly leaves its segments (torchfarm-<pid>-...).
            for segment in Path("/dev/shm").glob(f"torchfarm-{process.pid}-*"):
                segment.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
