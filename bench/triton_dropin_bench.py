#!/usr/bin/env python3
"""Triton drop-in figures (issue 30): NVIDIA's perf_analyzer against the farm's v2 front ends,
with and without Triton's system shared memory, beside `torchfarm bench` over ZeroMQ, in one run.

    .venv/bin/python bench/triton_dropin_bench.py --build-dir build [--rounds 2] [--seconds 3]
        [--markdown FILE]

Uses .venv's Python (numpy for the memcpy reference) and tools/perf-analyzer (2.51.0 from
.venv-perf-analyzer, tools/install-deps.sh). One farm, documented defaults except where a row says:
  identity  [-1, 256] float32, default instances; perf_analyzer c=1 and c=64
  mlp       [-1, 256], 2 CPU workers x 1 thread; c=16
  big       identity [-1, -1] with 17 MiB slots (the default 4 MiB cannot hold 16 MiB), one
            worker: a 16 MiB float32 tensor round trip at c=1, compared with memcpy bandwidth
            (numpy's copyto of 16 MiB, best of 50) as 16 MiB / p50
Each perf_analyzer run: --measurement-interval SECONDS*1000, up to 3 trials, its CSV (-f) read for
throughput, p50 and p99. ZeroMQ rows: `torchfarm bench --json` (closed loop, same concurrency;
--shm for the 16 MiB row: the farm's own client shared memory). Rounds alternate nothing but run
everything again, so the spread between rounds is the noise.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERF_ANALYZER = ROOT / "tools" / "perf-analyzer"
BIG_ELEMENTS = 4 * 1024 * 1024  # float32: 16 MiB


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    def __init__(self, bin_dir: Path, work: Path):
        models = work / "models"
        subprocess.run([str(bin_dir / "torchfarm-mkmodel"), "--all", str(models)], check=True,
                       capture_output=True)
        self.endpoint = f"ipc://{work}/jobs.sock"
        self.http, self.grpc = free_port(), free_port()
        identity = str(models / "identity.pt")
        config = {
            "endpoint": self.endpoint, "admin_endpoint": f"ipc://{work}/admin.sock",
            "run_dir": str(work / "run"),
            "http_endpoint": f"127.0.0.1:{self.http}", "grpc_endpoint": f"127.0.0.1:{self.grpc}",
            "frontend": {"system_shared_memory": True},
            "models": [
                {"name": "identity", "path": identity,
                 "inputs": [{"dtype": "float32", "shape": [-1, 256]}]},
                {"name": "mlp", "path": str(models / "mlp.pt"),
                 "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                 "instances": [{"device": "cpu", "count": 2, "threads": 1}]},
                {"name": "big", "path": identity, "slot_bytes": 17 * 1024 * 1024,
                 "inputs": [{"dtype": "float32", "shape": [-1, -1]}],
                 "instances": [{"device": "cpu", "count": 1}]},
            ],
        }
        (work / "farm.json").write_text(json.dumps(config))
        self.log = open(work / "supervisor.log", "w")
        self.proc = subprocess.Popen([str(bin_dir / "torchfarm-supervisor"), "--config",
                                      str(work / "farm.json")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/ready",
                                          timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the farm did not get ready in 90 s; see {work}/supervisor.log")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


def perf_analyzer(farm: Farm, protocol: str, model: str, c: int, seconds: float, shm: bool,
                  work: Path) -> dict:
    url = f"127.0.0.1:{farm.http if protocol == 'http' else farm.grpc}"
    out_csv = work / f"pa-{protocol}-{model}-{c}-{int(shm)}.csv"
    argv = [str(PERF_ANALYZER), "-m", model, "-i", protocol, "-u", url, "-b", "1",
            "--concurrency-range", str(c), "--measurement-interval", str(int(seconds * 1000)),
            "--stability-percentage", "100", "--max-trials", "3", "-f", str(out_csv)]
    if model == "big":
        argv += ["--shape", f"INPUT__0:{BIG_ELEMENTS}"]
    if shm:
        argv += ["--shared-memory", "system"]
        if model == "big":
            argv += ["--output-shared-memory-size", str(BIG_ELEMENTS * 4)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-600:], "req_s": 0, "p50_us": 0,
                "p99_us": 0}
    with open(out_csv) as f:
        row = next(csv.DictReader(f))
    return {"req_s": float(row["Inferences/Second"]), "p50_us": float(row["p50 latency"]),
            "p99_us": float(row["p99 latency"])}


def zmq_bench(bin_dir: Path, farm: Farm, model: str, c: int, seconds: float) -> dict:
    shape = f"1,{BIG_ELEMENTS}" if model == "big" else "1,256"
    argv = [str(bin_dir / "torchfarm"), "bench", "--endpoint", farm.endpoint, "--model", model,
            "--shape", shape, "--concurrency", str(c), "--seconds", str(seconds), "--warmup", "1",
            "--json"] + (["--shm"] if model == "big" else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600).stdout
    step = json.loads(out[out.index("{"):])["steps"][0]
    result = {"req_s": step["ok_per_s"], "p50_us": step["latency_us"]["p50"],
              "p99_us": step["latency_us"]["p99"]}
    if step["error_count"]:
        result["error"] = f"{step['error_count']} errors"
    return result


def memcpy_gbps() -> float:
    import numpy as np
    src = np.ones(BIG_ELEMENTS, dtype=np.float32)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(50):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return src.nbytes / best / 1e9


CASES = [("identity", 1), ("identity", 64), ("mlp", 16), ("big", 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    bin_dir = Path(args.build_dir).resolve() / "bin"
    results = []  # (round, model, c, path, result)
    with tempfile.TemporaryDirectory(prefix="torchfarm-triton-bench-") as tmp:
        work = Path(tmp)
        farm = Farm(bin_dir, work)
        try:
            for rnd in range(1, args.rounds + 1):
                for model, c in CASES:
                    paths = {"zmq": lambda: zmq_bench(bin_dir, farm, model, c, args.seconds)}
                    for protocol in ("grpc", "http"):
                        for shm in (False, True):
                            if model == "big" and not shm:
                                continue
                            paths[protocol + (" shm" if shm else "")] = (
                                lambda p=protocol, s=shm: perf_analyzer(farm, p, model, c,
                                                                        args.seconds, s, work))
                    for name, run in paths.items():
                        r = run()
                        results.append((rnd, model, c, name, r))
                        print(json.dumps({"round": rnd, "model": model, "concurrency": c,
                                          "path": name, **r}), flush=True)
        finally:
            farm.stop()
    copy = memcpy_gbps()
    big_bytes = BIG_ELEMENTS * 4
    lines = [f"memcpy of 16 MiB (numpy copyto, best of 50): {copy:.2f} GB/s", "",
             "| round | model | c | path | req/s | p50 us | p99 us | vs ZeroMQ | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    zmq = {(rnd, m, c): r for rnd, m, c, name, r in results if name == "zmq"}
    for rnd, model, c, name, r in results:
        base = zmq[(rnd, model, c)]
        if c == 1:
            versus = f"p50 {r['p50_us'] / base['p50_us']:.2f}x" if base["p50_us"] else "-"
        else:
            versus = f"{r['req_s'] / base['req_s']:.0%} of req/s" if base["req_s"] else "-"
        note = r.get("error", "")
        if model == "big" and r["p50_us"]:
            gbps = big_bytes / (r["p50_us"] / 1e6) / 1e9
            note = note or f"{gbps:.2f} GB/s = {gbps / copy:.0%} of memcpy"
        lines.append(f"| {rnd} | {model} | {c} | {name} | {r['req_s']:,.0f} | {r['p50_us']:,.0f} "
                     f"| {r['p99_us']:,.0f} | {versus} | {note} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0 if not any("error" in r for *_, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
