#!/usr/bin/python3
"""Supervisor core (issue 15): the acceptance figures, measured against real supervisors.

    /usr/bin/python3 bench/core_acceptance.py --bin-dir build/bin [--json OUT] [--cases 1,2,3,4,5]
        [--quick] [--models-dir DIR] [--label TEXT]

Every case starts its own supervisors from temporary configs (own run_dir, own ipc endpoints,
free TCP ports where a port is needed), always stops them (SIGTERM, then SIGKILL to the process
group they were started in), runs under a time limit, and reports what went wrong as a figure
("supervisor died: SIGSEGV") instead of stopping the script.

  1 kill storm      identity [-1,16] float32, 2 CPU workers, default `restart` policy, 16
                    closed-loop clients (pyzmq DEALER, the protocol of docs/protocol.md through
                    clients/python/torchfarm/_wire.py); a live worker SIGKILLed every 200 ms for
                    10 s. Figures: requests sent, ok, wrong (identity: output != input), errors
                    by code, lost (no reply within 30 s), seconds after the storm until health
                    shows the model ready with every worker ready (else "never within 60 s").
  2 max_inflight    identity, 2 workers, max_inflight_per_worker 4 and 8 (one farm each),
                    `torchfarm bench --concurrency 64` for 30 s (--quick: 10 s): supervisor alive
                    afterwards (pid and health), errors.
  3 second start    farm A (with metrics_endpoint); a second supervisor on the same config: its
                    exit code and message; then A's admin stats, a job and /metrics.
  4 batch delay     identity, 1 worker, max_batch_size 8, max_queue_delay_us 200 vs 0: two farms
                    up at once, `torchfarm bench --concurrency 1` interleaved ABAB 3 times;
                    p50 of each and the difference.
  5 conservation    mlp, 2 workers x 1 thread, `torchfarm bench --concurrency 16`, max_batch_size
                    16 vs 1 (max_queue_delay_us left at its default), 3 runs each of 10 s
                    (--quick: 3 s), alternating: throughput, ratio 16/1 per run, each worker's
                    share of the requests (admin stats `requests`, before/after each run).

Prints a markdown table; --json writes every figure and the commands that made them.
Needs /usr/bin/python3 with pyzmq and numpy (nothing from PyPI).
"""
import argparse
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import torchfarm  # noqa: E402
from torchfarm._wire import decode_reply, encode_request, reply_id  # noqa: E402

IDENTITY_SHAPE = [1, 16]
MLP_SHAPE = [1, 256]
READY_TIMEOUT_S = 120.0
LIVE_STATES = ("ready", "busy", "starting")


class CaseTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CaseTimeout()


def log(message):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def admin(endpoint, cmd, timeout=2.0):
    """The admin socket's JSON reply, or None when it does not answer in time."""
    try:
        return torchfarm.admin_command(endpoint, cmd, timeout=timeout)
    except (torchfarm.TorchfarmError, zmq.ZMQError, ValueError):
        return None


def exit_text(returncode):
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return "killed by %s" % signal.Signals(-returncode).name
        except ValueError:
            return "killed by signal %d" % -returncode
    return "exit %d" % returncode


def parent_pid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError:
        return []


def model_entry(name, path, shape, workers, **extra):
    entry = {"name": name, "path": path,
             "inputs": [{"dtype": "float32", "shape": [-1] + list(shape[1:])}],
             "instances": [{"device": "cpu", "count": workers, "threads": 1}]}
    entry.update(extra)
    return entry


class Farm:
    """One supervisor on a generated config, in a process group of its own."""

    def __init__(self, ctx, name, models, metrics=False):
        self.ctx = ctx
        self.name = name
        self.dir = os.path.join(ctx.tmp, name)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.endpoint = "ipc://%s/jobs.sock" % self.dir
        self.run_dir = os.path.join(self.dir, "run")
        self.admin = "ipc://%s/admin.sock" % self.run_dir  # the default admin_endpoint
        self.config = {"endpoint": self.endpoint, "run_dir": self.run_dir, "models": models}
        self.metrics_port = None
        if metrics:
            self.metrics_port = free_port()
            self.config["metrics_endpoint"] = "127.0.0.1:%d" % self.metrics_port
        self.config_path = os.path.join(self.dir, "config.json")
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=2)
        ctx.configs[name] = self.config
        self.proc = None
        self.log_path = os.path.join(self.dir, "supervisor.log")

    def argv(self):
        return [self.ctx.bin("torchfarm-supervisor"), "--config", self.config_path,
                "--log-level", "info"]

    def start(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log,
                                     start_new_session=True)
        self.ctx.farms.append(self)
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("supervisor %s %s at start: %s" % (
                    self.name, exit_text(self.proc.returncode), " | ".join(tail(self.log_path, 4))))
            health = admin(self.admin, "health", 0.5)
            if health and health.get("models") and all(
                    m["ready_workers"] == m["workers"] for m in health["models"]):
                return self
            time.sleep(0.1)
        raise RuntimeError("farm %s not ready in %.0f s" % (self.name, READY_TIMEOUT_S))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stats(self, timeout=2.0):
        return admin(self.admin, "stats", timeout)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        # The group: the supervisor if it ignored SIGTERM, and any worker it left behind.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if not self.log.closed:
            self.log.close()
        if self in self.ctx.farms:
            self.ctx.farms.remove(self)


class Context:
    def __init__(self, args):
        self.args = args
        self.bin_dir = os.path.abspath(args.bin_dir)
        self.tmp = tempfile.mkdtemp(prefix="tf-accept-")
        self.models_dir = os.path.abspath(args.models_dir) if args.models_dir else os.path.join(
            self.tmp, "models")
        self.configs = {}
        self.commands = []
        self.farms = []
        self.quick = args.quick

    def bin(self, name):
        return os.path.join(self.bin_dir, name)

    def model(self, name):
        return os.path.join(self.models_dir, name + ".pt")

    def cite(self, argv):
        text = " ".join(shlex.quote(a) for a in argv)
        text = text.replace(self.bin_dir + "/", "").replace(self.tmp + "/", "$TMP/")
        text = text.replace(self.models_dir + "/", "$MODELS/")
        self.commands.append(text)
        return text

    def write_models(self):
        if all(os.path.exists(self.model(m)) for m in ("identity", "mlp")):
            return
        os.makedirs(self.models_dir, exist_ok=True)
        subprocess.run([self.bin("torchfarm-mkmodel"), "--all", self.models_dir], check=True,
                       stdout=subprocess.DEVNULL, timeout=300)

    def stop_all(self):
        for farm in list(self.farms):
            farm.stop()

    def bench(self, farm, model, shape, concurrency, seconds, warmup=1.0):
        argv = [self.bin("torchfarm"), "bench", "--endpoint", farm.endpoint, "--model", model,
                "--shape", ",".join(str(d) for d in shape), "--concurrency", str(concurrency),
                "--seconds", str(seconds), "--warmup", str(warmup), "--json",
                "--admin-endpoint", farm.admin]
        cmd = self.cite(argv)
        out = {"cmd": cmd}
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  timeout=seconds + warmup + 90)
        except subprocess.TimeoutExpired:
            out["rc"] = "timeout"
            return out
        out["rc"] = proc.returncode
        out["stderr"] = proc.stderr.strip().splitlines()[-5:]
        try:
            report = json.loads(proc.stdout)
            step = report["steps"][0]
            out.update({"req_per_s": step["requests_per_s"], "ok": step["ok"],
                        "sent": step["sent"], "errors": step["errors"],
                        "error_count": step["error_count"], "p50_us": step["latency_us"]["p50"],
                        "p99_us": step["latency_us"]["p99"],
                        "mean_batch_size": step["mean_batch_size"]})
        except (ValueError, KeyError, IndexError, TypeError):
            out["stdout"] = proc.stdout[-500:]
        return out


# ---- case 1: kill storm ---------------------------------------------------------------------

class Killer(threading.Thread):
    """SIGKILLs one live worker of `farm` every `period` s until `stop` is set."""

    def __init__(self, farm, period, duration):
        super().__init__(daemon=True)
        self.farm = farm
        self.period = period
        self.duration = duration
        self.stop = threading.Event()
        self.kills = []  # (t, worker id, pid)
        self.ticks = 0
        self.no_live_worker = 0
        self.admin_timeouts = 0

    def run(self):
        begin = time.monotonic()
        tick = 0
        supervisor = self.farm.proc.pid
        while not self.stop.is_set():
            now = time.monotonic() - begin
            if now >= self.duration:
                break
            stats = admin(self.farm.admin, "stats", 1.0)
            if stats is None:
                self.admin_timeouts += 1
            else:
                live = [w for w in stats.get("workers", [])
                        if w.get("pid", -1) > 0 and w.get("state") in LIVE_STATES
                        and parent_pid(w["pid"]) == supervisor]
                if live:
                    w = random.choice(live)
                    try:
                        os.kill(w["pid"], signal.SIGKILL)
                        self.kills.append((round(now, 3), w["id"], w["pid"]))
                    except ProcessLookupError:
                        self.no_live_worker += 1
                else:
                    self.no_live_worker += 1
            tick += 1
            self.ticks = tick
            self.stop.wait(max(0.0, begin + tick * self.period - time.monotonic()))


class StormClients:
    """16 closed-loop DEALER clients, one request in flight each, on one poller."""

    def __init__(self, endpoint, count, model, shape, reply_timeout):
        self.context = zmq.Context.instance()
        self.model = model
        self.shape = shape
        self.reply_timeout = reply_timeout
        self.rng = np.random.default_rng(15)
        self.poller = zmq.Poller()
        self.clients = []
        self.next_id = 1
        self.counts = {"sent": 0, "ok": 0, "wrong": 0, "errors": {}, "lost": 0, "late": 0,
                       "send_failed": 0}
        self.messages = {}
        for _ in range(count):
            s = self.context.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, 1000)
            s.connect(endpoint)
            self.poller.register(s, zmq.POLLIN)
            self.clients.append({"socket": s, "id": None, "sent_at": 0.0, "x": None})
        self.by_socket = {c["socket"]: c for c in self.clients}

    def send(self, c):
        x = self.rng.standard_normal(self.shape).astype(np.float32)
        rid = self.next_id
        self.next_id += 1
        try:
            c["socket"].send_multipart(encode_request(rid, self.model, [x]), copy=False)
        except zmq.Again:
            self.counts["send_failed"] += 1
            c["id"] = None
            return
        c.update(id=rid, sent_at=time.monotonic(), x=x)
        self.counts["sent"] += 1

    def outstanding(self):
        return sum(1 for c in self.clients if c["id"] is not None)

    def _error(self, code, message):
        self.counts["errors"][code] = self.counts["errors"].get(code, 0) + 1
        seen = self.messages.setdefault(code, [])
        if len(seen) < 3 and message not in seen:
            seen.append(message)

    def _receive(self, c):
        frames = c["socket"].recv_multipart()
        rid, header = reply_id(frames[0])
        if header is None or rid != c["id"]:
            self.counts["late"] += 1
            return False
        c["id"] = None
        if header.get("status") == "error":
            self._error(str(header.get("code")), str(header.get("message", ""))[:300])
            return True
        try:
            (y,) = decode_reply(header, frames[1:])
        except (torchfarm.TorchfarmError, ValueError) as e:
            self._error("MALFORMED", str(e)[:300])
            return True
        if y.shape == c["x"].shape and np.array_equal(y, c["x"]):
            self.counts["ok"] += 1
        else:
            self.counts["wrong"] += 1
        return True

    def pump(self, timeout_ms, resend):
        """Handles replies for up to timeout_ms; with `resend`, each answered client sends again."""
        for s, _ in self.poller.poll(timeout_ms):
            c = self.by_socket[s]
            while c["socket"].getsockopt(zmq.EVENTS) & zmq.POLLIN:
                if self._receive(c) and resend:
                    self.send(c)
        now = time.monotonic()
        for c in self.clients:
            if c["id"] is not None and now - c["sent_at"] > self.reply_timeout:
                self.counts["lost"] += 1
                c["id"] = None
            if resend and c["id"] is None:
                self.send(c)

    def close(self):
        for c in self.clients:
            c["socket"].close(0)


def health_ready(farm):
    """True when health shows every model ready with all its workers ready."""
    h = admin(farm.admin, "health", 1.0)
    return bool(h and h.get("models") and all(
        m.get("ready") and m["ready_workers"] == m["workers"] for m in h["models"])), h


def case_kill_storm(ctx, res):
    storm_s = 5.0 if ctx.quick else 10.0
    reply_timeout, recovery_limit = 30.0, 60.0
    res["setup"] = ("identity [-1,16] float32, 2 CPU workers, default restart policy, 16 "
                    "closed-loop clients, SIGKILL every 200 ms for %.0f s; 1 s of load before "
                    "the storm is counted too" % storm_s)
    farm = Farm(ctx, "c1-storm", [model_entry("identity", ctx.model("identity"), IDENTITY_SHAPE,
                                              2)]).start()
    clients = StormClients(farm.endpoint, 16, "identity", IDENTITY_SHAPE, reply_timeout)
    killer = Killer(farm, 0.2, storm_s)
    try:
        for c in clients.clients:
            clients.send(c)
        warm_end = time.monotonic() + 1.0
        while time.monotonic() < warm_end:
            clients.pump(50, True)
        killer.start()
        storm_end = time.monotonic() + storm_s
        while time.monotonic() < storm_end:
            clients.pump(20, True)
        killer.stop.set()
        killer.join(5)
        after = time.monotonic()
        recovered_at = None
        next_health = after
        last_health = None
        while True:
            now = time.monotonic()
            if recovered_at is None and now >= next_health:
                ok, last_health = health_ready(farm)
                if ok:
                    recovered_at = time.monotonic()
                next_health = now + 0.25
            if clients.outstanding():
                clients.pump(50, False)
            else:
                time.sleep(0.05)
            done_replies = clients.outstanding() == 0
            done_recovery = recovered_at is not None or now - after > recovery_limit
            if done_replies and done_recovery:
                break
        counts = clients.counts
        res.update({k: counts[k] for k in ("sent", "ok", "wrong", "lost", "late", "send_failed")})
        res["errors"] = counts["errors"]
        res["error_messages"] = clients.messages
        res["kills"] = len(killer.kills)
        res["kill_ticks"] = killer.ticks
        res["kill_skipped_no_live_worker"] = killer.no_live_worker
        res["kill_admin_timeouts"] = killer.admin_timeouts
        res["recovery_s"] = (round(recovered_at - after, 2) if recovered_at is not None
                             else "never within %.0f s" % recovery_limit)
        res["health_last"] = last_health
        stats = farm.stats()
        if stats:
            res["workers_after"] = [{k: w.get(k) for k in ("id", "state", "restarts", "last_exit",
                                                          "failure_reason", "requests")}
                                    for w in stats["workers"]]
            res["model_state_after"] = [m.get("state") for m in stats["models"]]
        res["supervisor_after"] = "alive" if farm.alive() else exit_text(farm.proc.returncode)
    finally:
        killer.stop.set()
        clients.close()


# ---- case 2: max_inflight_per_worker 4 and 8 --------------------------------------------------

def case_max_inflight(ctx, res):
    seconds = 10.0 if ctx.quick else 30.0
    for inflight in (4, 8):
        key = "max_inflight_%d" % inflight
        entry = res.setdefault(key, {})
        farm = Farm(ctx, "c2-inflight%d" % inflight, [model_entry(
            "identity", ctx.model("identity"), IDENTITY_SHAPE, 2,
            max_inflight_per_worker=inflight)])
        try:
            farm.start()
            entry["bench"] = ctx.bench(farm, "identity", IDENTITY_SHAPE, 64, seconds)
            time.sleep(0.5)
            entry["supervisor_alive"] = farm.alive()
            entry["supervisor"] = "alive" if farm.alive() else exit_text(farm.proc.returncode)
            entry["health_answers"] = admin(farm.admin, "health", 2.0) is not None
            if not farm.alive():
                entry["log_tail"] = tail(farm.log_path, 6)
        except RuntimeError as e:
            entry["error"] = str(e)
        finally:
            farm.stop()


# ---- case 3: a second supervisor on the same config ------------------------------------------

def fetch_metrics(port):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open("http://127.0.0.1:%d/metrics" % port, timeout=3) as r:
            body = r.read().decode(errors="replace")
            return "HTTP %d, %d bytes%s" % (r.status, len(body), ", has torchfarm_requests_total"
                                            if "torchfarm_requests_total" in body else "")
    except Exception as e:  # noqa: BLE001 -- any failure is the figure
        return "failed: %s" % e


def one_job(endpoint):
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    try:
        with torchfarm.Client(endpoint, timeout=5) as client:
            (y,) = client.infer("identity", x)
        return "ok" if np.array_equal(y, x) else "wrong output"
    except torchfarm.TorchfarmError as e:
        return "failed: %s" % e


def farm_checks(farm):
    stats = admin(farm.admin, "stats", 3.0)
    return {"supervisor": "alive" if farm.alive() else exit_text(farm.proc.returncode),
            "admin_stats": ("ok (pid %s)" % stats["supervisor"]["pid"]) if stats else
                           "no reply within 3 s",
            "job": one_job(farm.endpoint),
            "metrics": fetch_metrics(farm.metrics_port),
            "files": {name: os.path.exists(os.path.join(farm.run_dir, name)) for name in
                      ("admin.sock", "supervisor.pid")} | {
                "jobs.sock": os.path.exists(farm.endpoint[len("ipc://"):])}}


def case_second_start(ctx, res):
    farm = Farm(ctx, "c3-second", [model_entry("identity", ctx.model("identity"), IDENTITY_SHAPE,
                                               1)], metrics=True).start()
    res["before"] = farm_checks(farm)
    argv = farm.argv()
    res["cmd"] = ctx.cite(argv)
    second = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = second.communicate(timeout=30)
        res["second_exit"] = exit_text(second.returncode)
        lines = [line for line in (err + out).splitlines() if line.strip()]
        errors = [line for line in lines if "level=error" in line or "error" in line.lower()]
        res["second_message"] = (errors or lines or [""])[-1][:400]
    except subprocess.TimeoutExpired:
        res["second_exit"] = "still running after 30 s (not refused)"
        res["second_message"] = ""
    finally:
        if second.poll() is None:
            try:
                os.killpg(second.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            second.wait(10)
    time.sleep(0.3)
    res["after"] = farm_checks(farm)


# ---- case 4: max_queue_delay_us 200 vs 0 at concurrency 1 -------------------------------------

def case_batch_delay(ctx, res):
    seconds = 2.0 if ctx.quick else 5.0
    farms = {}
    for delay in (200, 0):
        farms[delay] = Farm(ctx, "c4-delay%d" % delay, [model_entry(
            "identity", ctx.model("identity"), IDENTITY_SHAPE, 1, max_batch_size=8,
            max_queue_delay_us=delay)]).start()
    res["runs"] = []
    for rep in range(3):
        pair = {}
        for delay in (200, 0):
            b = ctx.bench(farms[delay], "identity", IDENTITY_SHAPE, 1, seconds)
            pair[delay] = b
            res["runs"].append({"rep": rep + 1, "delay_us": delay, **b})
        p200, p0 = pair[200].get("p50_us"), pair[0].get("p50_us")
        res.setdefault("diff_us", []).append(
            round(p200 - p0, 1) if p200 is not None and p0 is not None else None)
    res["p50_200"] = [r.get("p50_us") for r in res["runs"] if r["delay_us"] == 200]
    res["p50_0"] = [r.get("p50_us") for r in res["runs"] if r["delay_us"] == 0]
    res["errors"] = sum(r.get("error_count", 0) or 0 for r in res["runs"])
    res["supervisors"] = {d: "alive" if f.alive() else exit_text(f.proc.returncode)
                          for d, f in farms.items()}


# ---- case 5: work conservation, max_batch_size 16 vs 1 ---------------------------------------

def worker_requests(farm):
    stats = farm.stats()
    if not stats:
        return None
    return {w["id"]: (w.get("requests", 0), w.get("restarts", 0)) for w in stats["workers"]}


def case_conservation(ctx, res):
    seconds = 3.0 if ctx.quick else 10.0
    farms = {}
    for mbs in (16, 1):
        farms[mbs] = Farm(ctx, "c5-mbs%d" % mbs, [model_entry(
            "mlp", ctx.model("mlp"), MLP_SHAPE, 2, max_batch_size=mbs)]).start()
    res["runs"] = []
    for rep in range(3):
        pair = {}
        for mbs in (16, 1):
            before = worker_requests(farms[mbs])
            b = ctx.bench(farms[mbs], "mlp", MLP_SHAPE, 16, seconds)
            after = worker_requests(farms[mbs])
            shares = None
            if before and after:
                delta = {w: after[w][0] - before.get(w, (0, 0))[0] for w in after}
                total = sum(delta.values())
                shares = {str(w): round(d / total, 3) if total else None
                          for w, d in sorted(delta.items())}
                b["worker_requests"] = {str(w): d for w, d in sorted(delta.items())}
            b["worker_share"] = shares
            pair[mbs] = b
            res["runs"].append({"rep": rep + 1, "max_batch_size": mbs, **b})
        r16, r1 = pair[16].get("req_per_s"), pair[1].get("req_per_s")
        res.setdefault("ratio_16_over_1", []).append(round(r16 / r1, 2) if r16 and r1 else None)
    res["supervisors"] = {m: "alive" if f.alive() else exit_text(f.proc.returncode)
                          for m, f in farms.items()}


CASES = {
    1: ("kill storm", case_kill_storm, 240),
    2: ("max_inflight_per_worker 4 and 8", case_max_inflight, 300),
    3: ("second start refused", case_second_start, 150),
    4: ("batch delay latency at c=1", case_batch_delay, 240),
    5: ("work conservation", case_conservation, 300),
}


def run_case(ctx, number):
    name, fn, limit = CASES[number]
    if ctx.quick:
        limit = int(limit * 0.7)
    res = {"case": number, "name": name, "time_limit_s": limit}
    log("case %d: %s (limit %d s)" % (number, name, limit))
    started = time.time()
    res["loadavg_before"] = os.getloadavg()[0]
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(limit)
    try:
        fn(ctx, res)
    except CaseTimeout:
        res["failure"] = "time limit of %d s reached" % limit
    except Exception as e:  # noqa: BLE001 -- a failing case is a figure, not a crash
        res["failure"] = "%s: %s" % (type(e).__name__, e)
    finally:
        signal.alarm(0)
        ctx.stop_all()
    res["elapsed_s"] = round(time.time() - started, 1)
    res["loadavg_after"] = os.getloadavg()[0]
    log("case %d done in %.0f s%s" % (number, res["elapsed_s"],
                                      (": " + res["failure"]) if "failure" in res else ""))
    return res


# ---- report ----------------------------------------------------------------------------------

def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.1f" % value
    if isinstance(value, dict):
        return ", ".join("%s %s" % (k, v) for k, v in value.items()) or "none"
    if isinstance(value, list):
        return " / ".join(_fmt(v) for v in value)
    return str(value)


def _health_text(h):
    if not h:
        return "no answer"
    return ", ".join("%s ready=%s %d/%d workers ready" % (m["name"], m.get("ready"),
                                                         m["ready_workers"], m["workers"])
                     for m in h.get("models", []))


def _share_text(shares):
    if not shares:
        return "-"
    return ":".join("%.0f" % (100 * v) if v is not None else "-" for v in shares.values()) + "%"


def rows_for(res):
    n = res["case"]
    rows = []
    if "failure" in res:
        rows.append(("failure", res["failure"]))
    if n == 1 and "sent" in res:
        rows += [("sent / ok / wrong", "%d / %d / %d" % (res["sent"], res["ok"], res["wrong"])),
                 ("errors by code", _fmt(res["errors"])),
                 ("lost (no reply in 30 s)", res["lost"]),
                 ("SIGKILLs sent", "%d in %d ticks (%d ticks found no live worker)" % (
                     res["kills"], res["kill_ticks"], res["kill_skipped_no_live_worker"])),
                 ("ready after the storm", "%s s" % res["recovery_s"]
                  if isinstance(res["recovery_s"], float) else res["recovery_s"]),
                 ("worker states after (restarts)", " / ".join(
                     "w%s %s (%s)" % (w["id"], w["state"], w["restarts"])
                     for w in res.get("workers_after", []))),
                 ("health at the end", _health_text(res.get("health_last"))),
                 ("supervisor after", res["supervisor_after"])]
    if n == 2:
        for inflight in (4, 8):
            e = res.get("max_inflight_%d" % inflight)
            if not e:
                continue
            b = e.get("bench", {})
            rows.append(("mif %d: supervisor / health" % inflight,
                         "%s / %s" % (e.get("supervisor", e.get("error", "-")),
                                      "answers" if e.get("health_answers") else "no answer")))
            rows.append(("mif %d: req/s, errors" % inflight, "%s req/s, %s errors %s" % (
                _fmt(b.get("req_per_s")), _fmt(b.get("error_count")),
                _fmt(b.get("errors")) if b.get("errors") else "")))
    if n == 3 and "second_exit" in res:
        a = res["after"]
        rows += [("second supervisor", "%s: %s" % (res["second_exit"], res["second_message"])),
                 ("A afterwards: supervisor", a["supervisor"]),
                 ("A afterwards: admin stats", a["admin_stats"]),
                 ("A afterwards: job", a["job"]),
                 ("A afterwards: metrics", a["metrics"]),
                 ("A's socket files afterwards", _fmt(a["files"]))]
    if n == 4 and "diff_us" in res:
        rows += [("p50 us, delay 200", _fmt(res["p50_200"])),
                 ("p50 us, delay 0", _fmt(res["p50_0"])),
                 ("difference us (200 - 0)", _fmt(res["diff_us"]))]
    if n == 5 and "ratio_16_over_1" in res:
        for mbs in (16, 1):
            runs = [r for r in res["runs"] if r["max_batch_size"] == mbs]
            rows.append(("mbs %d req/s" % mbs, _fmt([r.get("req_per_s") for r in runs])))
            rows.append(("mbs %d worker shares" % mbs, " / ".join(
                _share_text(r.get("worker_share")) for r in runs)))
        rows.append(("ratio mbs16 / mbs1", _fmt(res["ratio_16_over_1"])))
    return rows


def markdown(results):
    out = ["| case | figure | value |", "| --- | --- | --- |"]
    for res in results:
        for figure, value in rows_for(res):
            out.append("| %d %s | %s | %s |" % (res["case"], res["name"], figure,
                                                 str(value).replace("|", "\\|")))
    return "\n".join(out)


def bin_label(bin_dir):
    try:
        return subprocess.run(["git", "-C", os.path.dirname(os.path.dirname(bin_dir)), "log",
                               "-1", "--format=%h"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main():
    parser = argparse.ArgumentParser(description="issue 15 acceptance figures")
    parser.add_argument("--bin-dir", required=True, help="folder of torchfarm, "
                        "torchfarm-supervisor, torchfarm-worker, torchfarm-mkmodel")
    parser.add_argument("--json", default="", help="write every figure here")
    parser.add_argument("--cases", default="1,2,3,4,5")
    parser.add_argument("--quick", action="store_true", help="shorter runs (dry run)")
    parser.add_argument("--models-dir", default="",
                        help="models from torchfarm-mkmodel --all (written when missing)")
    parser.add_argument("--label", default="", help="what the binaries are (default: the "
                        "commit of the checkout two folders above --bin-dir)")
    parser.add_argument("--keep-tmp", action="store_true", help="keep configs and logs")
    args = parser.parse_args()
    cases = [int(c) for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in CASES:
            parser.error("unknown case %d (1-5)" % c)
    ctx = Context(args)
    label = args.label or bin_label(ctx.bin_dir)
    results = []
    try:
        ctx.write_models()
        for c in cases:
            results.append(run_case(ctx, c))
    finally:
        ctx.stop_all()
        if args.keep_tmp:
            log("kept %s" % ctx.tmp)
        else:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
    table = markdown(results)
    print("Binaries: %s%s, %s, quick=%s, %d cores, load average now %.2f\n" % (
        ctx.bin_dir, " (%s)" % label if label else "", time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime()),
        args.quick, os.cpu_count(), os.getloadavg()[0]))
    print(table)
    if args.json:
        configs = json.loads(json.dumps(ctx.configs).replace(ctx.tmp, "$TMP").replace(
            ctx.models_dir, "$MODELS"))
        with open(args.json, "w") as f:
            json.dump({"bin_dir": ctx.bin_dir, "label": label, "quick": args.quick,
                       "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "cores": os.cpu_count(), "results": results, "configs": configs,
                       "commands": ctx.commands}, f, indent=2, default=str)
        log("wrote %s" % args.json)


if __name__ == "__main__":
    main()
