"""The peer benchmark's harness (issue 31, bench/peers/) without the peers: the one load
generator against the bare echo server (any body, headers, saved answers, hostile options), the
wire formats of every server, a measurement step's row schema and answer check, the process-tree
accounting, the report section and the plan's duration."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "peers"))

import bench_peers  # noqa: E402
import peer_measure  # noqa: E402
import peer_report  # noqa: E402
import peer_wire  # noqa: E402
import proc_tree  # noqa: E402
from peer_servers import Settings  # noqa: E402

BIN = Path(os.environ.get("TORCHFARM_BIN_DIR", ROOT / "build" / "bin"))
LOAD = str(BIN / "torchfarm-v2-http-load")


@pytest.fixture(scope="module")
def echo():
    # In its own session, as the harness starts every server: proc_tree counts a root's whole
    # session, and pytest's holds whatever else ctest runs beside it (ctest -j), whose CPU time
    # leaves the count when those exit (a negative server_cpu_s_per_1000).
    proc = subprocess.Popen([str(BIN / "torchfarm-http-echo"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    port = int(proc.stdout.readline().split()[1])
    yield proc, port
    proc.terminate()
    proc.wait(timeout=10)


def load(*args, check_rc=None):
    done = subprocess.run([LOAD, *map(str, args)], capture_output=True, text=True, timeout=60)
    if check_rc is not None:
        assert done.returncode == check_rc, done.stderr
    return done


def test_generator_posts_any_body_and_saves_answers(echo, tmp_path):
    _, port = echo
    body = tmp_path / "body.bin"
    body.write_bytes(b'{"data": "abc"}')
    saved = tmp_path / "saved"
    saved.mkdir()
    r = json.loads(load("--port", port, "--path", "/predict", "--body-file", body,
                        "--content-type", "application/json", "--header", "X-Test: 1",
                        "--concurrency", 4, "--seconds", 0.3, "--warmup-s", 0.1,
                        "--save-responses", saved, check_rc=0).stdout)
    assert r["errors"] == 0 and r["requests"] > 0 and r["req_s"] > 0
    assert r["sent_total"] >= r["requests"] and r["cpu_s"] >= 0
    assert 0 < r["p50_us"] <= r["p99_us"]
    files = sorted(saved.glob("response-*.bin"))
    assert len(files) == 4 and all(f.read_bytes() == body.read_bytes() for f in files)


def test_generator_default_v2_body_still_works(echo):
    _, port = echo
    r = json.loads(load("--port", port, "--concurrency", 2, "--seconds", 0.2, "--warmup-s", 0,
                        check_rc=0).stdout)
    assert r["errors"] == 0 and r["requests"] > 0


def test_generator_refuses_bad_options_then_works(echo, tmp_path):
    _, port = echo
    bad = load("--port", port, "--header", "no colon here", "--seconds", 0.2)
    assert bad.returncode == 2 and "expected \"Name: value\"" in bad.stderr
    assert load("--port", port, "--body-file", tmp_path / "missing.bin").returncode != 0
    assert load("--port", port, "--concurrency", 0).returncode != 0
    assert load("--port", port, "--save-responses", tmp_path / "nowhere").returncode != 0
    r = json.loads(load("--port", port, "--seconds", 0.2, "--warmup-s", 0, check_rc=0).stdout)
    assert r["errors"] == 0


def test_generator_counts_a_missing_server_as_errors():
    from peer_servers import free_port

    done = load("--port", free_port(), "--concurrency", 3, "--seconds", 0.2, "--warmup-s", 0)
    r = json.loads(done.stdout)
    assert done.returncode == 1 and r["errors"] == 3 and r["requests"] == 0
    assert r["first_error"].startswith("connect")


@pytest.mark.parametrize("server", peer_wire.SERVERS)
def test_each_servers_answer_decodes(server):
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    req = peer_wire.request_for(server, "m", x)
    assert req.path and req.body and req.content_type
    y = np.arange(6, dtype=np.float32) * 0.5
    if server in ("torchfarm", "triton"):
        assert req.path == "/v2/models/m/infer"
        length = int(req.headers[0].split(": ")[1])
        assert json.loads(req.body[:length])["inputs"][0]["shape"] == [1, 3, 4]
        assert np.array_equal(np.frombuffer(req.body[length:], "<f4").reshape(x.shape), x)
        head = json.dumps({"outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [1, 6],
                                        "parameters": {"binary_data_size": 24}}]}).encode()
        answer = head + y.tobytes()
    elif server == "litserve":
        answer = json.dumps({"data": __import__("base64").b64encode(y.tobytes()).decode()})
        answer = answer.encode()
    else:
        assert req.body == x.tobytes()
        answer = y.tobytes()
    got = peer_wire.decode_response(server, answer, [6])
    assert got.shape == (1, 6) and np.array_equal(got[0], y)
    with pytest.raises(ValueError):
        peer_wire.decode_response(server, answer, [7])


def test_hostile_answers_are_value_errors():
    with pytest.raises(ValueError):
        peer_wire.decode_response("nobody", b"", [1])
    with pytest.raises(ValueError):  # lying binary_data_size: fewer bytes than it says
        head = json.dumps({"outputs": [{"shape": [1, 6],
                                        "parameters": {"binary_data_size": 24}}]}).encode()
        peer_wire.decode_v2_binary(head + b"\0" * 8)
    with pytest.raises(ValueError):
        peer_wire.decode_v2_binary(b'{"error": "no such model"}')
    with pytest.raises(ValueError):
        peer_wire.decode_v2_binary(b"not json")
    with pytest.raises(ValueError):
        peer_wire.tensor_from_bytes(b"\0" * 7, [2])
    assert peer_wire.tensor_from_bytes(b"\0" * 8, [2]).shape == (1, 2)


class EchoAsTorchServe:
    """A stand-in server: the echo answers raw bytes, so its answer is the input itself."""
    name = "torchserve"

    def __init__(self, proc, port):
        self.proc, self.port = proc, port
        self.settings = Settings("default", 2, 16, 2000)

    def endpoint(self, model):
        return self.port

    def pids(self):
        return proc_tree.tree([self.proc.pid])


def test_a_step_yields_a_full_checked_row(echo, tmp_path):
    proc, port = echo
    meter = peer_measure.Meter(BIN, tmp_path, tmp_path, 0.3, 0.1)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    spec = {"in_shape": [8], "out_shape": [8]}
    row = meter.step(EchoAsTorchServe(proc, port), "mlp", spec, "http", 4, 1, x, x, True)
    assert set(row) == set(peer_measure.ROW_FIELDS)
    assert row["status"] == "ok" and row["errors"] == 0 and row["throughput_rps"] > 0
    assert row["checked"].startswith("4/4 match PyTorch")
    assert row["server_rss_mib"] > 0 and row["server_cpu_s_per_1000"] >= 0
    wrong = meter.step(EchoAsTorchServe(proc, port), "mlp", spec, "http", 1, 1, x, x + 1, True)
    assert wrong["errors"] == 4 and "differ from PyTorch" in wrong["note"]
    json.dumps([row, wrong])  # the rows are JSON as they are


class FlakyEchoServer(EchoAsTorchServe):
    """Fails its first `failures` starts, as PyTriton's stub handshake sometimes does."""

    def __init__(self, proc, port, failures):
        super().__init__(proc, port)
        self.models = {"mlp": {"in_shape": [8], "out_shape": [8]}}
        self.failures, self.stops = failures, 0

    def start(self):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("handshake refused")

    def stop(self):
        self.stops += 1


def test_a_failed_start_is_retried_once_then_reported(echo, tmp_path):
    proc, port = echo
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    np.save(tmp_path / "mlp.in.npy", x)
    np.save(tmp_path / "mlp.out.npy", x)
    meter = peer_measure.Meter(BIN, tmp_path, tmp_path, 0.2, 0.05)
    rows = meter.run_server(FlakyEchoServer(proc, port, 1), [1, 4], 1, check=True)
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["errors"] == 0 for r in rows)
    assert all("2nd try" in r["note"] and "handshake refused" in r["note"] for r in rows)
    assert rows[0]["checked"].startswith("4/4 match")
    server = FlakyEchoServer(proc, port, 2)
    rows = meter.run_server(server, [1, 4], 1, check=True)
    assert [r["status"] for r in rows] == ["not_run", "not_run"] and server.stops == 2
    assert all("did not start (twice): handshake refused" in r["note"] for r in rows)


def test_not_run_rows_carry_the_reason(tmp_path):
    meter = peer_measure.Meter(BIN, tmp_path, tmp_path, 1, 1)
    rows = meter.not_run("rayserve", {"mlp": {}}, [1, 16], Settings("tuned", 2, 32, 10000), 2,
                         "did not start: no ray")
    assert [r["status"] for r in rows] == ["not_run", "not_run"]
    assert all(r["note"] == "did not start: no ray" and set(r) == set(peer_measure.ROW_FIELDS)
               for r in rows)


def test_process_tree_counts_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        pids = proc_tree.tree([os.getpid()])
        assert os.getpid() in pids and child.pid in pids
        assert proc_tree.cpu_seconds(pids) > 0 and proc_tree.rss_mib(pids) > 1
    finally:
        child.kill()
        child.wait()


def row(server, model, c, rps, p50, p99, status="ok", note=""):
    r = peer_measure.empty_row(server, model, "http", c, "default", 1, status, note)
    r.update(throughput_rps=rps, p50_ms=p50, p99_ms=p99)
    return r


def test_report_section_goals_and_markers(tmp_path):
    rows = [row("torchfarm", "mlp", 16, 9000, 1.0, 2.0), row("torchserve", "mlp", 16, 2000, 5, 9),
            row("torchfarm", "mlp", 1, 500, 1.5, 2.0), row("litserve", "mlp", 1, 400, 1.2, 3),
            row("rayserve", "mlp", 16, 0, None, None, "not_run", "did not start: x")]
    meta = {"started": "now", "elapsed_s": 60, "expected_s": 60, "quick": True, "rounds": 1,
            "seconds": 1, "warmup": 0.5, "load_before": 0.1, "load_after": 0.1,
            "ceiling": [{"concurrency": 1, "throughput_rps": 1, "p50_ms": 1, "p99_ms": 1,
                         "errors": 0, "generator_cpu_s_per_1000": 1}],
            "versions": {"torch": "2.15.0"}, "blocked": {"rayserve": ""},
            "settings": {"torchfarm": {"default": "d", "tuned": "t"}}}
    text = peer_report.section(rows, meta)
    assert text.startswith(peer_report.BEGIN) and text.rstrip().endswith(peer_report.END)
    assert "Functional run, not figures" in text
    assert "| 4.50x | met |" in text  # 9000 / 2000 at c=16, p99 2 <= 9
    assert "litserve 1.20 ms | 1.25x | **missed** |" in text  # c=1 p50 1.5 vs 1.2
    assert "did not start: x" in text
    assert "where torchfarm's time goes is not measured" in text  # a goal was missed
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# head\n\n" + peer_report.BEGIN + "\nold\n" + peer_report.END + "\n\n## tail\n")
    peer_report.write_section(doc, text)
    peer_report.write_section(doc, text)  # twice: replaced, not appended
    new = doc.read_text()
    assert new.count(peer_report.BEGIN) == 1 and "old" not in new
    assert new.startswith("# head") and new.rstrip().endswith("## tail")


def test_a_tuned_setting_can_be_given():
    saved = dict(bench_peers.TUNED)
    try:
        bench_peers.parse_args(["--tune", "rayserve=48/7000"])
        s = bench_peers.settings_for("rayserve", "tuned")
        assert (s.workers, s.max_batch, s.delay_us) == (2, 48, 7000)
        assert bench_peers.settings_for("rayserve", "default").max_batch == 16
    finally:
        bench_peers.TUNED.clear()
        bench_peers.TUNED.update(saved)


def test_arguments_and_the_full_plan_fits():
    args = bench_peers.parse_args([])
    assert bench_peers.estimate_s(args) <= 40 * 60
    assert bench_peers.parse_args(["--quick"]).rounds == 1
    for bad in (["--servers", "tgi"], ["--models", "bert"], ["--concurrency", "x"],
                ["--rounds", "0"], ["--settings", "fast"], ["--tune", "torchserve=32"],
                ["--tune", "tgi=32/100"], ["--tune", "litserve=0/100"]):
        with pytest.raises(SystemExit):
            bench_peers.parse_args(bad)
