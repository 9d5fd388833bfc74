#!/usr/bin/env python3
"""NVIDIA's perf_analyzer against a real farm, as a Triton user runs it (issue 30).

    .venv/bin/python tests/tools/perf_analyzer_check.py SOURCE_DIR BIN_DIR

Starts torchfarm-supervisor with http_endpoint and grpc_endpoint serving mlp ([-1, 256]), then
runs tools/perf-analyzer (2.51.0 from .venv-perf-analyzer, tools/install-deps.sh) over gRPC and
HTTP at concurrency 1..16: each run must exit 0, report a throughput above 0 at every
concurrency, and print no error. perf_analyzer reads the model's configuration first over HTTP;
the HTTP run is made when the farm's server metadata advertises "model_configuration" (it is
skipped, saying so, on a farm that does not), over gRPC it runs either way with --shape; gRPC
also with --streaming (ModelStreamInfer); both with --shared-memory system (Triton's system shared
memory extension, on in this farm's config). Exit 77
(ctest: skipped) without perf_analyzer. Standard library only.
"""
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
import unittest
import urllib.request

SOURCE_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                             os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                          os.path.join(SOURCE_DIR, "build", "bin"))
PERF_ANALYZER = os.path.join(SOURCE_DIR, "tools", "perf-analyzer")
STEP = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")
CONCURRENCY = [1, 6, 11, 16]  # --concurrency-range 1:16:5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PerfAnalyzerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="torchfarm-perf-analyzer-")
        subprocess.run([os.path.join(BIN_DIR, "torchfarm-mkmodel"), "--all", cls.tmp + "/models"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.http, cls.grpc = free_port(), free_port()
        config = {"endpoint": f"ipc://{cls.tmp}/jobs.sock",
                  "admin_endpoint": f"ipc://{cls.tmp}/admin.sock", "run_dir": cls.tmp + "/run",
                  "http_endpoint": f"127.0.0.1:{cls.http}",
                  "grpc_endpoint": f"127.0.0.1:{cls.grpc}",
                  "models": [{"name": "mlp", "path": cls.tmp + "/models/mlp.pt",
                              "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                              "instances": [{"device": "cpu", "count": 2}]}],
                  # perf_analyzer's --shared-memory system (Triton's extension, loopback only).
                  "frontend": {"system_shared_memory": True}}
        with open(cls.tmp + "/config.json", "w") as f:
            json.dump(config, f)
        cls.farm = subprocess.Popen([os.path.join(BIN_DIR, "torchfarm-supervisor"), "--config",
                                     cls.tmp + "/config.json"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{cls.http}/v2/health/ready",
                                          timeout=2).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError("the farm did not become ready in 60 s")
        with urllib.request.urlopen(f"http://127.0.0.1:{cls.http}/v2", timeout=5) as r:
            cls.extensions = json.load(r).get("extensions", [])

    @classmethod
    def tearDownClass(cls):
        cls.farm.send_signal(signal.SIGTERM)
        cls.farm.wait(timeout=30)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_perf_analyzer(self, protocol, url, extra):
        argv = [PERF_ANALYZER, "-m", "mlp", "-i", protocol, "-u", url,
                "--concurrency-range", "1:16:5", "--measurement-interval", "1000",
                "--stability-percentage", "100", "--max-trials", "5"] + extra
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, f"{' '.join(argv)}\n{out[-3000:]}")
        self.assertNotRegex(out.lower(), r"\berror\b", out[-3000:])
        steps = {int(c): float(t) for c, t, _ in STEP.findall(out)}
        self.assertEqual(sorted(steps), CONCURRENCY, out[-3000:])
        for concurrency, throughput in steps.items():
            self.assertGreater(throughput, 0, f"concurrency {concurrency}")
        print(f"perf_analyzer -i {protocol}: " +
              ", ".join(f"c={c} {t:.0f} infer/s" for c, t in sorted(steps.items())))

    def test_grpc_at_concurrency_1_to_16(self):
        extra = [] if "model_configuration" in self.extensions else ["--shape", "INPUT__0:1,256"]
        self.run_perf_analyzer("grpc", f"127.0.0.1:{self.grpc}", extra)

    def test_http_at_concurrency_1_to_16(self):
        if "model_configuration" not in self.extensions:
            self.skipTest("the farm does not advertise model_configuration: perf_analyzer's HTTP "
                          f"client stops at 'failed to get model config' (extensions: "
                          f"{self.extensions})")
        self.run_perf_analyzer("http", f"127.0.0.1:{self.http}", [])

    def test_system_shared_memory_over_grpc_and_http(self):
        # perf_analyzer creates its regions (shm_open), registers them, names them in every
        # request's inputs and outputs, and unregisters them at the end.
        self.assertIn("system_shared_memory", self.extensions)
        self.run_perf_analyzer("grpc", f"127.0.0.1:{self.grpc}", ["--shared-memory", "system"])
        self.run_perf_analyzer("http", f"127.0.0.1:{self.http}", ["--shared-memory", "system"])
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/systemsharedmemory/status",
                                    timeout=5) as r:
            self.assertEqual(json.load(r), [], "perf_analyzer unregisters its regions")

    def test_grpc_streaming_at_concurrency_1_to_16(self):
        # ModelStreamInfer: one stream per concurrent client, one response per request.
        self.run_perf_analyzer("grpc", f"127.0.0.1:{self.grpc}", ["--streaming"])


if __name__ == "__main__":
    if subprocess.run([PERF_ANALYZER, "--version"], capture_output=True).returncode != 0:
        print("skipped: no perf_analyzer (./tools/install-deps.sh installs .venv-perf-analyzer)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], "-v"])
