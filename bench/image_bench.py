#!/usr/bin/python3
"""The worker's image pipeline against client-side decoding (issue 20), resnet18, 16 clients.

Three farms, one after another, each one CPU worker of resnet18 (models/real, `make models-real`:
random weights; --worker-threads intra-op threads, default 1), max_batch_size 8, and the same
JPEGs (photo-like 500x375, quality 85):
  client-decode  each client decodes the JPEG (PIL), resizes the shorter side to 256, crops 224,
                 normalises (numpy) and sends float32 [1, 3, 224, 224] (602 KB)
  pipeline       the client sends the JPEG bytes ("bytes" input); the worker decodes and
                 pre-processes on its stage pool (--decode-threads, default 1), overlapped with
                 the model (pipeline.overlap)
  no-overlap     the same with "overlap": false
The clients are threads of this process on the same machine as the farm (so the client's decode
competes for the same cores, as it does when a service and its farm share a host).

Reports per mode: images/s, p50/p99 latency, request bytes on the wire per image, CPU seconds
per image in the supervisor and in the worker (from /proc), as JSON lines and a markdown table.

Usage: bench/image_bench.py --build-dir build [--seconds 15] [--clients 16] [--rounds 2]
                            [--markdown FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import torchfarm  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_jpegs(count: int) -> list[bytes]:
    from PIL import Image
    rng = np.random.default_rng(0)
    out = []
    for k in range(count):
        y, x = np.mgrid[0:375, 0:500].astype(np.float32)
        base = np.stack([np.sin(x / (30 + k) + k), np.cos(y / (25 + k)), np.sin((x + y) / 60)], 2)
        pixels = ((base * 0.5 + 0.5) * 200 + rng.normal(0, 12, base.shape)).clip(0, 255)
        buffer = io.BytesIO()
        Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="JPEG", quality=85)
        out.append(buffer.getvalue())
    return out


def client_preprocess(jpeg: bytes) -> np.ndarray:
    """What a client does without the pipeline: decode, resize, crop, normalise."""
    from PIL import Image
    image = Image.open(io.BytesIO(jpeg)).convert("RGB")
    w, h = image.size
    scale = 256 / min(w, h)
    image = image.resize((round(w * scale), round(h * scale)), Image.BILINEAR)
    w, h = image.size
    left, top = (w - 224) // 2, (h - 224) // 2
    image = image.crop((left, top, left + 224, top + 224))
    x = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return ((x - MEAN) / STD)[None].astype(np.float32)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(entry.name))
    return out


class Farm:
    def __init__(self, build: Path, work: Path, mode: str, models: Path, threads: int,
                 decode_threads: int):
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        model = {"name": "resnet18", "path": str(models / "resnet18.pt"),
                 "instances": [{"device": "cpu", "count": 1, "threads": threads}],
                 "max_batch_size": 8, "max_queue_delay_us": 2000}
        if mode == "client-decode":
            model["inputs"] = [{"dtype": "float32", "shape": [-1, 3, 224, 224]}]
            model["slot_bytes"] = 8 << 20
        else:
            model["inputs"] = [{"dtype": "bytes", "shape": [-1]}]
            model["pipeline"] = {"decode": {"format": "jpeg", "threads": decode_threads},
                                 "preprocess": str(models / "resnet18_pre.pt"),
                                 "overlap": mode == "pipeline"}
        run = work / f"run-{mode}"
        config = {"endpoint": self.endpoint, "run_dir": str(run), "models": [model]}
        path = work / f"{mode}.json"
        path.write_text(json.dumps(config))
        self.log = open(work / f"supervisor-{mode}.log", "w")
        self.proc = subprocess.Popen([str(build / "bin" / "torchfarm-supervisor"), "--config",
                                      str(path)], stdout=self.log, stderr=subprocess.STDOUT)
        admin = f"ipc://{run / 'admin.sock'}"
        deadline = time.time() + 90
        while time.time() < deadline:
            r = subprocess.run([str(build / "bin" / "torchfarm"), "ctl", "--admin", admin,
                                "--timeout-ms", "1000", "health"], capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"the {mode} farm did not get ready; see {self.log.name}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


def run_mode(build: Path, work: Path, models: Path, mode: str, jpegs: list[bytes],
             clients: int, seconds: float, threads: int, decode_threads: int) -> dict:
    farm = Farm(build, work, mode, models, threads, decode_threads)
    try:
        # Warm the model (first batches are slow) before measuring.
        with torchfarm.Client(farm.endpoint, timeout=120) as client:
            for k in range(4):
                client.infer("resnet18", client_preprocess(jpegs[k]) if mode == "client-decode"
                             else [jpegs[k]])
        workers = children(farm.proc.pid)
        cpu_before = (cpu_seconds(farm.proc.pid), sum(cpu_seconds(p) for p in workers))
        latencies: list[list[float]] = [[] for _ in range(clients)]
        wire = [0] * clients
        stop_at = time.time() + seconds

        def work_loop(c: int):
            with torchfarm.Client(farm.endpoint, timeout=120) as client:
                k = c
                while time.time() < stop_at:
                    jpeg = jpegs[k % len(jpegs)]
                    k += clients
                    start = time.perf_counter()
                    if mode == "client-decode":
                        tensor = client_preprocess(jpeg)
                        wire[c] += tensor.nbytes
                        client.infer("resnet18", tensor)
                    else:
                        wire[c] += len(jpeg) + 4
                        client.infer("resnet18", [jpeg])
                    latencies[c].append(time.perf_counter() - start)

        began = time.time()
        threads = [threading.Thread(target=work_loop, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - began
        cpu_after = (cpu_seconds(farm.proc.pid), sum(cpu_seconds(p) for p in workers))
    finally:
        farm.stop()
    all_latencies = np.array(sorted(x for per in latencies for x in per))
    images = len(all_latencies)
    return {"mode": mode, "images": images, "images_per_s": images / elapsed,
            "p50_ms": float(np.percentile(all_latencies, 50) * 1e3),
            "p99_ms": float(np.percentile(all_latencies, 99) * 1e3),
            "wire_bytes_per_image": sum(wire) / max(images, 1),
            "supervisor_cpu_ms_per_image": (cpu_after[0] - cpu_before[0]) * 1e3 / max(images, 1),
            "worker_cpu_ms_per_image": (cpu_after[1] - cpu_before[1]) * 1e3 / max(images, 1),
            "jpeg_bytes_mean": float(np.mean([len(j) for j in jpegs]))}


def markdown(results: list[dict], round_number: int) -> str:
    base = next((r for r in results if r["mode"] == "client-decode"), results[0])
    lines = [f"Round {round_number}:", "", "| mode | images/s | vs client-decode | p50 ms | p99 ms | wire bytes/image | "
             "supervisor CPU ms/image | worker CPU ms/image |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['images_per_s']:.1f} | "
                     f"{r['images_per_s'] / base['images_per_s']:.2f}x | {r['p50_ms']:.0f} | "
                     f"{r['p99_ms']:.0f} | {r['wire_bytes_per_image']:.0f} | "
                     f"{r['supervisor_cpu_ms_per_image']:.2f} | "
                     f"{r['worker_cpu_ms_per_image']:.1f} |")
    return "\n".join(lines) + "\n\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--models", default=str(ROOT / "models" / "real"))
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--modes", default="client-decode,pipeline,no-overlap")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=1,
                        help="the worker's intra-op threads (instances[].threads)")
    parser.add_argument("--decode-threads", type=int, default=1,
                        help="pipeline.decode.threads")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    models = Path(args.models)
    if not (models / "resnet18.pt").exists():
        print(f"image_bench: skipped: {models}/resnet18.pt missing (make models-real)",
              file=sys.stderr)
        return 3
    jpegs = make_jpegs(32)
    results = []
    # Modes alternate within each round, so load from elsewhere on a shared machine falls on all
    # of them; the table shows each round.
    with tempfile.TemporaryDirectory(prefix="tf-image-bench-") as tmp:
        for round_number in range(1, args.rounds + 1):
            for mode in args.modes.split(","):
                result = run_mode(Path(args.build_dir), Path(tmp), models, mode, jpegs,
                                  args.clients, args.seconds, args.worker_threads,
                                  args.decode_threads)
                result["round"] = round_number
                print(json.dumps(result), flush=True)
                results.append(result)
    table = "".join(markdown([r for r in results if r["round"] == n], n)
                    for n in range(1, args.rounds + 1))
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
