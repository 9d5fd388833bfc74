#!/usr/bin/env python3
"""Supervisor instructions per request, per client path, counted by callgrind (issue 36).

Instruction counts do not depend on what else the machine runs, so unlike a timing this figure
can be taken on a busy machine and compared between commits. For each path the harness:
  1. starts `torchfarm-supervisor` under `valgrind --tool=callgrind` with one exec'd CPU worker
     serving `identity` (float32 [-1, 256]) and, for the v2 paths, its HTTP or gRPC front end;
  2. sends `--warmup` requests one at a time (c=1), then zeroes the counters
     (`callgrind_control --zero`), sends `--requests` more, and dumps (`--dump`);
  3. reports the dump's instructions divided by the requests, the loop's turns per request
     (loop_turns: the figure moves with them), and the five functions with the most instructions
     of their own (callgrind_annotate).
Every thread of the supervisor is counted (the loop, ZeroMQ's I/O thread, the front ends').

Paths: zmq (the farm's own protocol, pyzmq DEALER), http (v2, binary tensor extension),
http-json (v2, 256 numbers as JSON), grpc (v2, raw_input_contents); and, asked for by name, the
references grpc-echo (gRPC alone: bench/grpc_echo.cc) and zmq-echo (ZeroMQ alone: bench/zmq_echo.cc,
a ROUTER answering each request with its own data), both under the supervisor's allocator. The
clients are the project's .venv Python (pyzmq, tritonclient); their own cost is not counted, only
the server's.

Usage: .venv/bin/python bench/instructions.py --build-dir build [--paths zmq,http]
          [--requests 2000] [--warmup 200] [--json FILE] [--markdown FILE]
`make bench-instructions` runs it on the default build. A path takes about 1-2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PATHS = ("zmq", "http", "http-json", "grpc")
# A reference, not the farm: torchfarm-bench-grpc-echo (bench/grpc_echo.cc), gRPC's callback API
# answering ModelInfer with its inputs and nothing else, under the supervisor's allocator. What
# gRPC itself costs a call in the server process, the floor under the grpc path's figure.
# torchfarm-bench-zmq-echo (bench/zmq_echo.cc) is ZeroMQ's: the zmq path's client against a ROUTER
# that answers each request with its own data frames, blocking receives, nothing else.
REFERENCES = ("grpc-echo", "zmq-echo")
REFERENCE_BINARIES = {"grpc-echo": "torchfarm-bench-grpc-echo", "zmq-echo": "torchfarm-bench-zmq-echo"}
WIDTH = 256


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(work: Path, build: Path, model: Path, path: str) -> dict:
    config = {
        "endpoint": f"ipc://{work}/jobs.sock",
        "admin_endpoint": f"ipc://{work}/admin.sock",
        "run_dir": str(work / "run"),
        "worker_launch": "exec",
        "worker_binary": str(build / "bin" / "torchfarm-worker"),
        "models": [{"name": "identity", "path": str(model),
                    "inputs": [{"dtype": "float32", "shape": [-1, WIDTH]}],
                    "instances": [{"device": "cpu", "count": 1}]}],
    }
    if path in ("http", "http-json"):
        config["http_endpoint"] = f"127.0.0.1:{free_port()}"
    if path in ("grpc", "grpc-echo"):
        config["grpc_endpoint"] = f"127.0.0.1:{free_port()}"
    (work / "config.json").write_text(json.dumps(config))
    return config


class ZmqClient:
    def __init__(self, config: dict):
        import zmq
        self.zmq = zmq
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.connect(config["endpoint"])
        self.x = np.random.default_rng(1).random((1, WIDTH), dtype=np.float32)

    def infer(self, i: int, timeout_ms: int = 10_000) -> bool:
        header = {"v": 1, "id": i, "model": "identity",
                  "inputs": [{"dtype": "float32", "shape": [1, WIDTH]}]}
        self.socket.send_multipart([json.dumps(header).encode(), self.x.tobytes()])
        if not self.socket.poll(timeout_ms):
            return False
        frames = self.socket.recv_multipart()
        reply = json.loads(frames[0])
        return reply.get("status") == "ok" and np.frombuffer(frames[1], np.float32).tolist() == \
            self.x.ravel().tolist()


class V2Client:
    """tritonclient, as a Triton user would call it; binary or JSON tensors."""

    def __init__(self, config: dict, path: str):
        self.x = np.random.default_rng(1).random((1, WIDTH), dtype=np.float32)
        self.binary = path != "http-json"
        if path == "grpc":
            import tritonclient.grpc as client
            self.client = client.InferenceServerClient(config["grpc_endpoint"])
        else:
            import tritonclient.http as client
            self.client = client.InferenceServerClient(config["http_endpoint"])
        self.module = client

    def infer(self, i: int, timeout_ms: int = 10_000) -> bool:
        del i, timeout_ms
        tensor = self.module.InferInput("INPUT__0", list(self.x.shape), "FP32")
        if self.module.__name__.endswith("grpc"):
            tensor.set_data_from_numpy(self.x)
            outputs = None
        else:
            tensor.set_data_from_numpy(self.x, binary_data=self.binary)
            outputs = [self.module.InferRequestedOutput("OUTPUT__0", binary_data=self.binary)]
        try:
            result = self.client.infer("identity", [tensor], outputs=outputs)
        except Exception:  # noqa: BLE001 - a refused request while the farm starts
            return False
        out = result.as_numpy("OUTPUT__0")
        return out is not None and np.array_equal(out.reshape(self.x.shape), self.x)


def callgrind(pid: int, command: str) -> None:
    subprocess.run(["callgrind_control", command, str(pid)], check=True, capture_output=True,
                   timeout=120)


def top_functions(dump: Path, count: int = 5) -> list[tuple[str, int]]:
    """The functions with the most instructions of their own in a callgrind dump.

    Read straight from the file (written with --compress-strings=no --compress-pos=no):
    callgrind_annotate 3.19 charges a dump taken mid-run to the frames already on the stack.
    A cost line belongs to the current `fn=`, except the one after `calls=`, which is a call's
    inclusive cost."""
    own: dict[str, int] = {}
    function = ""
    after_calls = False
    for line in dump.read_text().splitlines():
        if line.startswith("fn="):
            function = line[3:]
        elif line.startswith("calls="):
            after_calls = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and not after_calls:
                own[function] = own.get(function, 0) + int(parts[1])
            after_calls = False
    ranked = sorted(own.items(), key=lambda item: -item[1])[:count]
    # Cut the argument list, not an anonymous namespace's "(anonymous namespace)::".
    return [(re.sub(r"\(.*", "", name.replace("(anonymous namespace)::", "{anon}::"))
             .replace("{anon}::", "").strip()[:70], n) for name, n in ranked]


def loop_turns(dump: Path) -> int:
    """How many turns the supervisor's loop ran (calls of Supervisor::RunTurn; 0 for the echoes).

    The figure per request depends on it: at c=1 a request usually takes two turns (its arrival,
    its worker's answer), but when the next request arrives before a turn ends, that turn reads it
    too and the fixed cost of a turn (the wait, the duties) is shared. Timing decides which, so a
    count that moved with the turns is not a change in the code's cost."""
    turns = 0
    function = callee = ""
    for line in dump.read_text().splitlines():
        if line.startswith("fn="):
            function = line[3:]
        elif line.startswith("cfn="):
            callee = line[4:]
        elif line.startswith("calls=") and "Supervisor::RunTurn(" in callee \
                and "Supervisor::Run()" in function:
            turns += int(line[6:].split()[0])
    return turns


def total_instructions(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def supervisor_allocator(build: Path) -> str:
    """The malloc library torchfarm-supervisor loads beside libc ('' for glibc's own)."""
    out = subprocess.run(["ldd", str(build / "bin" / "torchfarm-supervisor")], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "tcmalloc" in line or "jemalloc" in line:
            return line.split("=>")[1].split("(")[0].strip()
    return ""


def measure(build: Path, model: Path, path: str, warmup: int, requests: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"tf-instr-{path}-"))
    try:
        config = write_config(work, build, model, path)
        out = work / "cg.out"
        server = [str(build / "bin" / "torchfarm-supervisor"), "--config",
                  str(work / "config.json"), "--log-level", "warn"]
        env = None
        if path == "grpc-echo":
            server = [str(build / "bin" / "torchfarm-bench-grpc-echo"), "--listen",
                      config["grpc_endpoint"]]
            env = dict(os.environ, LD_PRELOAD=supervisor_allocator(build))
        if path == "zmq-echo":
            server = [str(build / "bin" / "torchfarm-bench-zmq-echo"), "--bind", config["endpoint"]]
            env = dict(os.environ, LD_PRELOAD=supervisor_allocator(build))
        supervisor = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no",
             f"--callgrind-out-file={out}"] + server,
            stdout=open(work / "supervisor.log", "w"), stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.time() + 180
            client = None
            while True:
                if supervisor.poll() is not None:
                    raise RuntimeError(f"{path}: the supervisor exited; see {work}/supervisor.log")
                try:
                    client = client or (ZmqClient(config) if path in ("zmq", "zmq-echo") else
                                        V2Client(config, "grpc" if path == "grpc-echo" else path))
                    if client.infer(-1, 2_000):
                        break
                except Exception:  # noqa: BLE001 - the front end is not listening yet
                    client = None
                if time.time() > deadline:
                    raise RuntimeError(f"{path}: no answer within 180 s")
                time.sleep(0.5)
            for i in range(warmup):
                if not client.infer(i):
                    raise RuntimeError(f"{path}: warm-up request {i} failed")
            callgrind(supervisor.pid, "--dump=warm-up")
            for i in range(requests):
                if not client.infer(warmup + i):
                    raise RuntimeError(f"{path}: request {i} failed or answered wrong")
            callgrind(supervisor.pid, "--dump=measured")
        finally:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(timeout=120)
        dump = Path(f"{out}.2")
        total = total_instructions(dump)
        return {"path": path, "requests": requests,
                "instructions_per_request": round(total / requests),
                "loop_turns_per_request": round(loop_turns(dump) / requests, 2),
                "top": [{"function": f, "per_request": round(n / requests)}
                        for f, n in top_functions(dump)]}
    finally:
        if not os.environ.get("TORCHFARM_KEEP_INSTRUCTIONS"):
            shutil.rmtree(work, ignore_errors=True)


def markdown(rows: list[dict]) -> str:
    lines = ["| path | supervisor instructions per request | loop turns per request "
             "| top five functions (own instructions per request) |",
             "|---|---:|---:|---|"]
    for r in rows:
        top = "; ".join(f"`{t['function']}` {t['per_request']:,}" for t in r["top"])
        turns = f"{r['loop_turns_per_request']:.2f}" if r["loop_turns_per_request"] else "-"
        lines.append(f"| {r['path']} | {r['instructions_per_request']:,} | {turns} | {top} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    unknown = [p for p in paths if p not in PATHS + REFERENCES]
    if unknown:
        parser.error(f"--paths: expected some of {','.join(PATHS + REFERENCES)}, "
                     f"got {','.join(unknown)}")
    for reference, binary in REFERENCE_BINARIES.items():
        if reference in paths and not (Path(args.build_dir) / "bin" / binary).exists():
            parser.error(f"--paths {reference}: build it first (cmake --build BUILD --target "
                         f"{binary})")
    if args.requests < 1 or args.warmup < 1:
        parser.error("--requests and --warmup: expected at least 1")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            print(f"instructions: {tool} not found (apt-get install valgrind)", file=sys.stderr)
            return 2
    build = Path(args.build_dir).resolve()
    models = Path(tempfile.mkdtemp(prefix="tf-instr-models-"))
    subprocess.run([str(build / "bin" / "torchfarm-mkmodel"), "--all", str(models)], check=True,
                   capture_output=True)
    rows = []
    try:
        for path in paths:
            row = measure(build, models / "identity.pt", path, args.warmup, args.requests)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(models, ignore_errors=True)
    table = markdown(rows)
    print(table)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
