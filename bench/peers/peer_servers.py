"""Starting, probing and stopping each server of the peer benchmark (issue 31).

Every server gets the same CPU budget: `workers` worker processes (or replicas, or model
instances) per model of one intra-op thread each, dynamic batching of at most `max_batch` rows
waiting at most `delay_us`; each is started in its own session (bench/peers/proc_tree.py counts
its processes) and is ready once every model answered a real request. The peers run from the
peers' venv (bench/peers/install_peers.sh), torchfarm from the build's bin folder.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import proc_tree
from peer_wire import request_for

HERE = Path(__file__).resolve().parent


def free_port(span: int = 1) -> int:
    """A loopback port with `span` - 1 free ports after it (servers that take P, P+1, P+2)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + span < 65000 and all(_port_free(port + i) for i in range(1, span)):
            return port
    raise RuntimeError("no free loopback ports")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Settings:
    """One batching setting of a server: `name` is "default" (max batch 16, 2 ms: the same for
    all) or "tuned" (the server's setting for its best throughput)."""

    def __init__(self, name: str, workers: int, max_batch: int, delay_us: int,
                 optimize: str = "none"):
        self.name, self.workers, self.max_batch, self.delay_us = name, workers, max_batch, delay_us
        # torchfarm's model "optimize" (docs/models.md); the peers have no such setting.
        self.optimize = optimize

    def describe(self) -> str:
        text = (f"{self.workers} workers x 1 thread, max batch {self.max_batch}, "
                f"delay {self.delay_us / 1000:g} ms")
        return text + (f", optimize {self.optimize}" if self.optimize != "none" else "")


class Server:
    """Base: one server serving some models; subclasses say how to start it and where to ask."""

    name = ""
    start_timeout_s = 180.0

    def __init__(self, settings: Settings, models: dict, models_dir: Path, work: Path,
                 peers_venv: Path, bin_dir: Path):
        self.settings, self.models, self.models_dir = settings, models, models_dir
        self.work = work / f"{self.name}-{settings.name}"
        self.peers_venv, self.bin_dir = peers_venv, bin_dir
        self.procs: list[subprocess.Popen] = []
        self.logs = []

    # -- what subclasses give --------------------------------------------------------------
    def launch(self) -> None:
        raise NotImplementedError

    def endpoint(self, model: str) -> int:
        """The HTTP port serving `model`."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------
    def env(self) -> dict:
        env = dict(os.environ)
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env["PATH"] = f"{self.peers_venv / 'bin'}:{env.get('PATH', '')}"
        env.pop("VIRTUAL_ENV", None)
        return env

    def spawn(self, cmd: list[str], log_name: str, env: dict | None = None) -> None:
        log = open(self.work / log_name, "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=self.work, env=env or self.env(),
                                           start_new_session=True))

    def python(self) -> str:
        return str(self.peers_venv / "bin" / "python")

    def start(self) -> None:
        self.procs, self.logs = [], []  # a retried start begins afresh
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        self.launch()
        deadline = time.monotonic() + self.start_timeout_s
        for model in self.models:
            self.wait_ready(model, deadline)

    def wait_ready(self, model: str, deadline: float) -> None:
        import numpy as np

        x = np.load(self.models_dir / f"{model}.in.npy")
        req = request_for(self.name, model, x)
        last = ""
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{self.name} exited with status {dead[0].returncode} while "
                                   f"starting; see {self.work}: {self.log_tail()}")
            try:
                http = urllib.request.Request(
                    f"http://127.0.0.1:{self.endpoint(model)}{req.path}", data=req.body,
                    headers=dict([("Content-Type", req.content_type)] +
                                 [tuple(h.split(": ", 1)) for h in req.headers]))
                with urllib.request.urlopen(http, timeout=30) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError, ConnectionError) as e:
                last = str(e)
            time.sleep(0.5)
        raise RuntimeError(f"{self.name}: model {model} not ready after "
                           f"{self.start_timeout_s:.0f} s (last: {last}); {self.log_tail()}")

    def log_tail(self) -> str:
        lines = []
        for log in self.logs:
            log.flush()
            try:
                lines += Path(log.name).read_text(errors="replace").splitlines()[-6:]
            except OSError:
                pass
        return " | ".join(lines)[-1200:]

    def pids(self) -> list[int]:
        return proc_tree.tree([p.pid for p in self.procs])

    def stop(self) -> None:
        pids = self.pids()
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        time.sleep(0.5)
        for pid in proc_tree.tree(pids):  # what outlived its parent: started here, ended here
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for log in self.logs:
            log.close()


class Torchfarm(Server):
    name = "torchfarm"
    start_timeout_s = 120.0

    def launch(self) -> None:
        self.http_port, self.grpc_port, zmq_port = free_port(), free_port(), free_port()
        self.zmq_endpoint = f"tcp://127.0.0.1:{zmq_port}"
        s = self.settings
        config = {
            "endpoint": self.zmq_endpoint,
            "run_dir": str(self.work / "run"),
            "http_endpoint": f"127.0.0.1:{self.http_port}",
            "grpc_endpoint": f"127.0.0.1:{self.grpc_port}",
            "models": [{"name": m, "path": str(self.models_dir / f"{m}.pt"),
                        "inputs": [{"dtype": "float32", "shape": [-1] + spec["in_shape"]}],
                        "outputs": [{"dtype": "float32", "shape": [-1] + spec["out_shape"]}],
                        "instances": [{"device": "cpu", "count": s.workers, "threads": 1}],
                        "max_batch_size": s.max_batch, "max_queue_delay_us": s.delay_us,
                        "optimize": s.optimize}
                       for m, spec in self.models.items()],
        }
        path = self.work / "farm.json"
        path.write_text(json.dumps(config, indent=1))
        self.spawn([str(self.bin_dir / "torchfarm-supervisor"), "--config", str(path)],
                   "supervisor.log", env=dict(os.environ))

    def endpoint(self, model: str) -> int:
        return self.http_port


class TorchServe(Server):
    name = "torchserve"

    def launch(self) -> None:
        store = self.work / "store"
        store.mkdir()
        s = self.settings
        for model, spec in self.models.items():
            extra = self.work / model / "peer_model.json"
            extra.parent.mkdir()
            extra.write_text(json.dumps(spec))
            subprocess.run([str(self.peers_venv / "bin" / "torch-model-archiver"),
                            "--model-name", model, "--version", "1.0",
                            "--serialized-file", str(self.models_dir / f"{model}.pt"),
                            "--handler", str(HERE / "servers" / "torchserve_handler.py"),
                            "--extra-files", str(extra), "--export-path", str(store),
                            "--archive-format", "zip-store", "--force"],
                           check=True, capture_output=True, env=self.env())
        self.port = free_port(3)
        models = {m: {"1.0": {"defaultVersion": True, "marName": f"{m}.mar",
                              "minWorkers": s.workers, "maxWorkers": s.workers,
                              "batchSize": s.max_batch,
                              "maxBatchDelay": max(1, round(s.delay_us / 1000)),
                              "responseTimeout": 120}} for m in self.models}
        (self.work / "config.properties").write_text("\n".join([
            f"inference_address=http://127.0.0.1:{self.port}",
            f"management_address=http://127.0.0.1:{self.port + 1}",
            f"metrics_address=http://127.0.0.1:{self.port + 2}",
            f"model_store={store}",
            "load_models=" + ",".join(f"{m}.mar" for m in self.models),
            "models=" + json.dumps(models),
            f"default_workers_per_model={s.workers}",
            "disable_token_authorization=true",
            "job_queue_size=1000",
            "", ]))
        self.spawn([str(self.peers_venv / "bin" / "torchserve"), "--start", "--foreground",
                    "--ncs", "--ts-config", str(self.work / "config.properties"),
                    "--model-store", str(store)], "torchserve.log")

    def endpoint(self, model: str) -> int:
        return self.port


class PyTriton(Server):
    name = "triton"

    def launch(self) -> None:
        s = self.settings
        self.port = free_port(3)
        env = self.env()
        # Triton's Python backend stub must load this interpreter's libpython, not Debian's.
        libdir = subprocess.run([self.python(), "-c",
                                 "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                                capture_output=True, text=True, check=True).stdout.strip()
        env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
        self.spawn([self.python(), str(HERE / "servers" / "pytriton_server.py"),
                    "--port", str(self.port), "--models-dir", str(self.models_dir),
                    "--models", ",".join(self.models), "--workers", str(s.workers),
                    "--max-batch", str(s.max_batch), "--delay-us", str(s.delay_us)],
                   "pytriton.log", env=env)

    def endpoint(self, model: str) -> int:
        return self.port


class RayServe(Server):
    name = "rayserve"
    start_timeout_s = 300.0

    def launch(self) -> None:
        s = self.settings
        self.port = free_port()
        env = self.env()
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.spawn([self.python(), str(HERE / "servers" / "rayserve_app.py"),
                    "--port", str(self.port), "--models-dir", str(self.models_dir),
                    "--models", ",".join(self.models), "--workers", str(s.workers),
                    "--max-batch", str(s.max_batch), "--delay-us", str(s.delay_us)],
                   "rayserve.log", env=env)

    def endpoint(self, model: str) -> int:
        return self.port


class LitServe(Server):
    name = "litserve"

    def launch(self) -> None:
        s = self.settings
        self.ports = {}
        for model in self.models:
            self.ports[model] = free_port()
            self.spawn([self.python(), str(HERE / "servers" / "litserve_app.py"),
                        "--port", str(self.ports[model]), "--models-dir", str(self.models_dir),
                        "--model", model, "--workers", str(s.workers),
                        "--max-batch", str(s.max_batch), "--delay-us", str(s.delay_us)],
                       f"litserve-{model}.log")

    def endpoint(self, model: str) -> int:
        return self.ports[model]


SERVER_CLASSES = {c.name: c for c in (Torchfarm, TorchServe, PyTriton, RayServe, LitServe)}
