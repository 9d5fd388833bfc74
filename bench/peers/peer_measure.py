"""One measurement step of the peer benchmark (issue 31) and the rows it yields: the generator
against a started server at one concurrency, the server's CPU and memory around it, and the
check of a sample of answers against PyTorch.

Row fields (the JSON of `--json FILE`, a list): server, model, protocol (http, grpc, zmq),
generator (torchfarm-v2-http-load, the one for all; perf_analyzer, in addition for the v2
servers; torchfarm bench and torchfarm-bench-grpc for torchfarm's ZeroMQ and gRPC), concurrency, settings (default/tuned), round, throughput_rps, p50_ms, p99_ms, errors,
server_cpu_s_per_1000 and generator_cpu_s_per_1000 (CPU seconds per 1,000 requests, warm-up
included in both the seconds and the requests), server_rss_mib (all of the server's processes,
at the end of the step), checked ("4/4 match PyTorch", "" when not checked), status (ok, failed,
not_run) and note (the reason when not ok, the first error when errors > 0).
"""
from __future__ import annotations

import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import proc_tree
from peer_models import ATOL, RTOL
from peer_wire import decode_response, request_for, v2_binary_request

ROW_FIELDS = ("server", "model", "protocol", "generator", "concurrency", "settings", "round",
              "throughput_rps",
              "p50_ms", "p99_ms", "errors", "server_cpu_s_per_1000", "generator_cpu_s_per_1000",
              "server_rss_mib", "checked", "status", "note")


GENERATORS = {"http": "torchfarm-v2-http-load", "zmq": "torchfarm bench",
              "grpc": "torchfarm-bench-grpc", "perf_analyzer": "perf_analyzer"}
PERF_ANALYZER = Path(__file__).resolve().parents[2] / "tools" / "perf-analyzer"


def empty_row(server, model, protocol, c, settings, rnd, status, note) -> dict:
    """protocol: http, zmq, grpc, or perf_analyzer (HTTP driven by perf_analyzer)."""
    return {"server": server, "model": model,
            "protocol": "http" if protocol == "perf_analyzer" else protocol,
            "generator": GENERATORS[protocol], "concurrency": c,
            "settings": settings, "round": rnd, "throughput_rps": 0.0, "p50_ms": None,
            "p99_ms": None, "errors": 0, "server_cpu_s_per_1000": None,
            "generator_cpu_s_per_1000": None, "server_rss_mib": None, "checked": "",
            "status": status, "note": note}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_json(cmd: list[str], timeout: float) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = done.stdout
    if "{" not in out:
        raise RuntimeError(f"{Path(cmd[0]).name} printed no JSON (status {done.returncode}): "
                           f"{done.stderr.strip()[-400:]}")
    return json.loads(out[out.index("{"):])


class Meter:
    def __init__(self, bin_dir: Path, models_dir: Path, work: Path, seconds: float, warmup: float):
        self.bin_dir, self.models_dir, self.work = bin_dir, models_dir, work
        self.seconds, self.warmup = seconds, warmup
        self.timeout = seconds + warmup + 120

    # -- the generator ----------------------------------------------------------------------
    def http(self, port: int, request, c: int, save_dir: Path | None = None) -> dict:
        body = self.work / f"body-{abs(hash((request.path, request.body)))}.bin"
        if not body.exists():
            body.write_bytes(request.body)
        cmd = [str(self.bin_dir / "torchfarm-v2-http-load"), "--port", str(port),
               "--path", request.path, "--body-file", str(body),
               "--content-type", request.content_type, "--concurrency", str(c),
               "--seconds", str(self.seconds), "--warmup-s", str(self.warmup)]
        for header in request.headers:
            cmd += ["--header", header]
        if save_dir:
            cmd += ["--save-responses", str(save_dir)]
        r = run_json(cmd, self.timeout)
        return {"throughput_rps": r["req_s"], "p50_ms": r["p50_us"] / 1000,
                "p99_ms": r["p99_us"] / 1000, "errors": r["errors"], "total": r["sent_total"],
                "first_error": r.get("first_error", "")}

    def zmq(self, endpoint: str, model: str, shape: list[int], c: int) -> dict:
        r = run_json([str(self.bin_dir / "torchfarm"), "bench", "--endpoint", endpoint,
                      "--model", model, "--shape", ",".join(map(str, [1] + shape)),
                      "--concurrency", str(c), "--seconds", str(self.seconds),
                      "--warmup", str(self.warmup), "--json"], self.timeout)
        return self._steps(r)

    def grpc(self, port: int, model: str, shape: list[int], c: int) -> dict:
        r = run_json([str(self.bin_dir / "torchfarm-bench-grpc"), "--target", f"127.0.0.1:{port}",
                      "--model", model, "--shape", ",".join(map(str, [1] + shape)),
                      "--concurrency", str(c), "--seconds", str(self.seconds),
                      "--warmup", str(self.warmup), "--json"], self.timeout)
        return self._steps(r)

    def perf_analyzer(self, port: int, model: str, c: int) -> dict:
        """NVIDIA's perf_analyzer (tools/perf-analyzer) over HTTP with binary tensors, reading
        the model's config from the server; its own windows, >= 3 s each (one must hold answers
        of resnet18 at c=16 on 2 cores), up to 5, the last 3 within 100% of each other (a loose
        bound, so a busy machine still gets a figure)."""
        csv = self.work / f"perf-analyzer-{port}-{model}-{c}.csv"
        window_ms = int(max(self.seconds, 3.0) * 1000)
        done = subprocess.run([str(PERF_ANALYZER), "-m", model, "-u", f"127.0.0.1:{port}",
                               "-i", "http", "--concurrency-range", str(c), "-p", str(window_ms),
                               "-r", "5", "-s", "100", "-f", str(csv)],
                              capture_output=True, text=True,
                              timeout=self.timeout + 60)
        if done.returncode != 0 or not csv.exists():
            raise RuntimeError(f"perf_analyzer exited with {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-300:]}")
        header, values = csv.read_text().splitlines()[:2]
        r = dict(zip(header.split(","), values.split(",")))
        return {"throughput_rps": float(r["Inferences/Second"]),
                "p50_ms": float(r["p50 latency"]) / 1000, "p99_ms": float(r["p99 latency"]) / 1000,
                "errors": 0, "total": None, "first_error": ""}

    def _steps(self, r: dict) -> dict:
        step = r["steps"][0]
        rate = step["ok_per_s"]
        return {"throughput_rps": rate, "p50_ms": step["latency_us"]["p50"] / 1000,
                "p99_ms": step["latency_us"]["p99"] / 1000, "errors": step["error_count"],
                "total": rate * (self.seconds + self.warmup), "first_error": ""}

    # -- the generator's own ceiling ----------------------------------------------------------
    def echo_ceiling(self, concurrency: list[int]) -> list[dict]:
        """The generator against torchfarm-http-echo with mlp's v2 request: the most it can
        measure on this machine (the echo does no work)."""
        echo = subprocess.Popen([str(self.bin_dir / "torchfarm-http-echo"), "--port", "0"],
                                stdout=subprocess.PIPE, text=True)
        try:
            port = int(echo.stdout.readline().split()[1])
            x = np.load(self.models_dir / "mlp.in.npy")
            out = []
            for c in concurrency:
                before = children_cpu_s()
                r = self.http(port, v2_binary_request("mlp", x), c)
                gen = children_cpu_s() - before
                out.append({"concurrency": c, "throughput_rps": r["throughput_rps"],
                            "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": r["errors"],
                            "generator_cpu_s_per_1000": 1000 * gen / max(1, r["total"])})
            return out
        finally:
            echo.terminate()
            echo.wait(timeout=10)

    # -- one server ----------------------------------------------------------------------------
    def not_run(self, server, models, concurrency, settings, rnd, reason) -> list[dict]:
        return [empty_row(server, m, "http", c, settings.name, rnd, "not_run", reason)
                for m in models for c in concurrency]

    def run_server(self, server, concurrency: list[int], rnd: int, check: bool,
                   perf_analyzer_c: int = 0) -> list[dict]:
        """All steps of one started server; perf_analyzer_c > 0: also perf_analyzer at that
        concurrency where the server speaks v2 (torchfarm, triton)."""
        name, settings = server.name, server.settings.name
        began, first_failure = time.monotonic(), ""
        for attempt in (1, 2):  # one retry: PyTriton's stub handshake sometimes fails under load
            try:
                server.start()
                break
            except Exception as e:  # a peer that does not start is reported, with its reason
                server.stop()
                print(f"bench-peers: {name} ({settings}) did not start (try {attempt}): {e}",
                      flush=True)
                if attempt == 2:
                    return self.not_run(name, server.models, concurrency, server.settings, rnd,
                                        f"did not start (twice): {e}")
                first_failure = f"started at the 2nd try; the 1st: {str(e)[:120]}"
        print(f"bench-peers: {name} ({settings}) ready in {time.monotonic() - began:.0f} s",
              flush=True)
        rows = []
        try:
            for model, spec in server.models.items():
                x = np.load(self.models_dir / f"{model}.in.npy")
                want = np.load(self.models_dir / f"{model}.out.npy")
                steps = [("http", c) for c in concurrency]
                if perf_analyzer_c and name in ("torchfarm", "triton"):
                    steps.append(("perf_analyzer", perf_analyzer_c))
                if name == "torchfarm" and settings == "default":
                    steps += [("zmq", c) for c in concurrency]
                    if (self.bin_dir / "torchfarm-bench-grpc").exists():
                        steps += [("grpc", c) for c in concurrency]
                for protocol, c in steps:
                    rows.append(self.step(server, model, spec, protocol, c, rnd, x, want,
                                          check and protocol == "http" and c == concurrency[0]))
                    if first_failure and not rows[-1]["note"]:
                        rows[-1]["note"] = first_failure
        finally:
            server.stop()
        return rows

    def step(self, server, model, spec, protocol, c, rnd, x, want, check) -> dict:
        row = empty_row(server.name, model, protocol, c, server.settings.name, rnd, "ok", "")
        pids = server.pids()
        cpu_before, gen_before = proc_tree.cpu_seconds(pids), children_cpu_s()
        try:
            with tempfile.TemporaryDirectory(dir=self.work) as saved:
                if protocol == "http":
                    r = self.http(server.endpoint(model), request_for(server.name, model, x), c,
                                  Path(saved) if check else None)
                    if check:
                        row["checked"], bad = self.check(server.name, Path(saved), want, spec)
                        if bad:
                            row["errors"] += bad
                            row["note"] = f"answers differ from PyTorch: {row['checked']}"
                elif protocol == "perf_analyzer":
                    r = self.perf_analyzer(server.endpoint(model), model, c)
                elif protocol == "zmq":
                    r = self.zmq(server.zmq_endpoint, model, spec["in_shape"], c)
                else:
                    r = self.grpc(server.grpc_port, model, spec["in_shape"], c)
        except Exception as e:  # the generator failed: the row says why
            row.update(status="failed", note=f"{type(e).__name__}: {e}")
            return row
        pids = server.pids()
        server_cpu = proc_tree.cpu_seconds(pids) - cpu_before
        gen_cpu = children_cpu_s() - gen_before
        row.update(throughput_rps=round(r["throughput_rps"], 1), p50_ms=round(r["p50_ms"], 3),
                   p99_ms=round(r["p99_ms"], 3), errors=row["errors"] + r["errors"],
                   server_rss_mib=round(proc_tree.rss_mib(pids), 1))
        if r["total"] is not None:  # perf_analyzer does not say how many it sent in all
            total = max(1.0, r["total"])
            row.update(server_cpu_s_per_1000=round(1000 * server_cpu / total, 3),
                       generator_cpu_s_per_1000=round(1000 * gen_cpu / total, 3))
        if r["throughput_rps"] == 0:
            row.update(p50_ms=None, p99_ms=None)
            row["note"] = row["note"] or "no answer within the measured window"
        if r["errors"] and not row["note"]:
            row["note"] = r["first_error"][:300]
        print(json.dumps(row), flush=True)
        return row

    def check(self, server: str, saved: Path, want: np.ndarray, spec) -> tuple[str, int]:
        """'K/N match PyTorch (max |diff| D)' over the saved answers, and how many did not."""
        files = sorted(saved.glob("response-*.bin"))
        bad, worst = 0, 0.0
        for f in files:
            try:
                got = decode_response(server, f.read_bytes(), spec["out_shape"])
                worst = max(worst, float(np.max(np.abs(got - want))))
                if not np.allclose(got, want, atol=ATOL, rtol=RTOL):
                    bad += 1
            except (ValueError, KeyError) as e:
                print(f"bench-peers: {server}: undecodable answer: {e}", flush=True)
                bad += 1
        if not files:  # a window shorter than one answer's latency: nothing to check, no error
            return "not checked: no answer within the window", 0
        return f"{len(files) - bad}/{len(files)} match PyTorch (max abs diff {worst:.1e})", bad
