#!/usr/bin/python3
"""KServe v2 front ends against the ZeroMQ path and against bare echo servers (issue 17).

Starts one farm serving the `identity` model (one CPU worker, documented defaults) with its HTTP
and gRPC front ends on free loopback ports, and measures, in one run and `--rounds` times:
  - ZeroMQ:  `torchfarm bench` against the farm, and against `torchfarm bench --echo-server`
  - HTTP:    torchfarm-v2-http-load (binary tensor extension, keep-alive) against the farm, and
             against torchfarm-http-echo (bare Boost.Beast)
  - gRPC:    torchfarm-bench-grpc against the farm, and against torchfarm-bench-grpc-echo
each at concurrency 1 (p50 latency) and 64 (throughput), input float32 [1, 256].
Prints one JSON line per measurement and a markdown table (ratios per round) at the end;
`--markdown FILE` writes the table there too.

Usage: bench/frontend_bench.py --build-dir build-release [--seconds 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    start = out.index("{")
    return json.loads(out[start:])


def zmq_bench(bin_dir: Path, endpoint: str, model: str, c: int, seconds: float) -> dict:
    r = run_json([str(bin_dir / "torchfarm"), "bench", "--endpoint", endpoint, "--model", model,
                  "--shape", "1,256", "--concurrency", str(c), "--seconds", str(seconds),
                  "--warmup", "1", "--json"])
    step = r["steps"][0]
    return {"p50_us": step["latency_us"]["p50"], "req_s": step["ok_per_s"],
            "errors": step["error_count"]}


def http_bench(bin_dir: Path, port: int, path: str, c: int, seconds: float) -> dict:
    r = run_json([str(bin_dir / "torchfarm-v2-http-load"), "--port", str(port), "--path", path,
                  "--concurrency", str(c), "--seconds", str(seconds), "--warmup-s", "1"])
    return {"p50_us": r["p50_us"], "req_s": r["req_s"], "errors": r["errors"]}


def grpc_bench(bin_dir: Path, port: int, c: int, seconds: float) -> dict:
    r = run_json([str(bin_dir / "torchfarm-bench-grpc"), "--target", f"127.0.0.1:{port}",
                  "--model", "identity", "--shape", "1,256", "--concurrency", str(c),
                  "--seconds", str(seconds), "--warmup", "1", "--json"])
    step = r["steps"][0]
    return {"p50_us": step["latency_us"]["p50"], "req_s": step["ok_per_s"],
            "errors": step["error_count"]}


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 20) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    raise RuntimeError(f"no '{prefix}' line from {proc.args}")


class Farm:
    def __init__(self, bin_dir: Path, work: Path):
        self.bin_dir = bin_dir
        models = work / "models"
        subprocess.run([str(bin_dir / "torchfarm-mkmodel"), "--all", str(models)], check=True,
                       capture_output=True)
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.http_port, self.grpc_port = free_port(), free_port()
        config = {
            "endpoint": self.endpoint,
            "run_dir": str(work / "run"),
            "http_endpoint": f"127.0.0.1:{self.http_port}",
            "grpc_endpoint": f"127.0.0.1:{self.grpc_port}",
            "models": [{"name": "identity", "path": str(models / "identity.pt"),
                        "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                        "instances": [{"count": 1}]}],
        }
        path = work / "farm.json"
        path.write_text(json.dumps(config))
        self.log = open(work / "supervisor.log", "w")
        self.proc = subprocess.Popen([str(bin_dir / "torchfarm-supervisor"), "--config", str(path)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        admin = f"ipc://{work / 'run' / 'admin.sock'}"
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run([str(bin_dir / "torchfarm"), "ctl", "--admin", admin,
                                "--timeout-ms", "1000", "health"], capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("the farm did not get ready; see supervisor.log")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build-release")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    bin_dir = Path(args.build_dir).resolve() / "bin"
    rows = []
    with tempfile.TemporaryDirectory(prefix="torchfarm-frontend-bench-") as tmp:
        work = Path(tmp)
        farm = Farm(bin_dir, work)
        zmq_echo_ep = f"tcp://127.0.0.1:{free_port()}"
        zmq_echo = subprocess.Popen([str(bin_dir / "torchfarm"), "bench", "--echo-server",
                                     zmq_echo_ep], stdout=subprocess.PIPE, text=True)
        wait_for_line(zmq_echo, "echo server ready")
        http_echo = subprocess.Popen([str(bin_dir / "torchfarm-http-echo"), "--port", "0"],
                                     stdout=subprocess.PIPE, text=True)
        http_echo_port = int(wait_for_line(http_echo, "port").split()[1])
        grpc_echo = subprocess.Popen([str(bin_dir / "torchfarm-bench-grpc-echo"),
                                      "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
        grpc_echo_port = int(wait_for_line(grpc_echo, "ready").split()[1])
        try:
            for rnd in range(1, args.rounds + 1):
                for c in (1, 64):
                    m = {
                        "zmq farm": zmq_bench(bin_dir, farm.endpoint, "identity", c, args.seconds),
                        "zmq echo": zmq_bench(bin_dir, zmq_echo_ep, "x", c, args.seconds),
                        "http farm": http_bench(bin_dir, farm.http_port,
                                                "/v2/models/identity/infer", c, args.seconds),
                        "http echo": http_bench(bin_dir, http_echo_port, "/echo", c,
                                                args.seconds),
                        "grpc farm": grpc_bench(bin_dir, farm.grpc_port, c, args.seconds),
                        "grpc echo": grpc_bench(bin_dir, grpc_echo_port, c, args.seconds),
                    }
                    for name, r in m.items():
                        print(json.dumps({"round": rnd, "concurrency": c, "path": name, **r}))
                    rows.append((rnd, c, m))
        finally:
            for p in (zmq_echo, http_echo, grpc_echo):
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=10)
            farm.stop()
    lines = ["| round | c | ZeroMQ farm | HTTP farm | gRPC farm | ZeroMQ echo | Beast echo | gRPC echo "
             "| HTTP / Beast echo | gRPC / gRPC echo | HTTP / ZeroMQ farm |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rnd, c, m in rows:
        if c == 1:
            v = {k: m[k]["p50_us"] for k in m}
            cell = lambda k: f"p50 {v[k]:.0f} µs"
            ratio = lambda a, b: f"{v[a] / v[b]:.2f}x" if v[b] else "-"
        else:
            v = {k: m[k]["req_s"] for k in m}
            cell = lambda k: f"{v[k] / 1000:.1f}k req/s"
            ratio = lambda a, b: f"{v[a] / v[b]:.2f}x" if v[b] else "-"
        lines.append(f"| {rnd} | {c} | {cell('zmq farm')} | {cell('http farm')} | {cell('grpc farm')} "
                     f"| {cell('zmq echo')} | {cell('http echo')} | {cell('grpc echo')} "
                     f"| {ratio('http farm', 'http echo')} | {ratio('grpc farm', 'grpc echo')} "
                     f"| {ratio('http farm', 'zmq farm')} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    errors = sum(m[k]["errors"] for _, _, m in rows for k in m)
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
