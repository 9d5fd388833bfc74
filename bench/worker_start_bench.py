#!/usr/bin/python3
"""Issue 19's figures, side by side in one run (repeat with --rounds): how fast a farm gets a
worker back and what the adaptive idle poll costs.

  1. replacement start  launch -> ready of a worker restarted after SIGKILL, no spare:
                        worker_launch "zygote" (default) vs "exec"; median of --kills restarts
  2. kill storm         16 clients on identity (2 workers, default restart policy); one serving
                        worker SIGKILLed every 200 ms for 10 s: throughput against the same farm's
                        steady state just before, with 0 and 1 warm spares; then (issue 27) the
                        same storm over every child of the supervisor, the zygotes included, and
                        over the zygotes alone (no spare)
  4. zygote memory      RSS, PSS, private (USS) and page-table bytes of the primary zygote (exec'd),
                        the standby (forked from it) and a worker (/proc/PID/smaps_rollup, status)
  3. idle poll          identity c=1 p50 against the bare ZeroMQ echo (default settings; no
                        queue delay, so nothing waits for company), and
                        c=64 throughput with the default (adaptive, idle_spin_us 300) against
                        idle_spin_us 0

Run from the repository root after a build:
  /usr/bin/python3 bench/worker_start_bench.py --build-dir build [--rounds 2] [--json out.json]
      [--figures start,storm,poll,memory]
Prints one table per figure; the targets are those of issue 19 (docs/benchmarks.md).
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_suite import admin_call  # noqa: E402


class Farm:
    """A supervisor on `models` with `extra` top-level keys; stops with SIGTERM."""

    def __init__(self, bin_dir, tmp, name, models, extra=None):
        self.bin_dir = bin_dir
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.endpoint = "ipc://%s/jobs.sock" % self.dir
        self.admin = "ipc://%s/run/admin.sock" % self.dir
        config = {"endpoint": self.endpoint, "admin_endpoint": self.admin,
                  "run_dir": self.dir + "/run", "models": models}
        config.update(extra or {})
        self.config_path = os.path.join(self.dir, "config.json")
        with open(self.config_path, "w") as f:
            json.dump(config, f)

    def __enter__(self):
        self.log = open(os.path.join(self.dir, "supervisor.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "torchfarm-supervisor"), "--config", self.config_path,
             "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=self.log)
        self.wait(lambda s: all(w["state"] == "ready" for w in s["workers"]), 120)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def stats(self):
        return admin_call(self.admin, "stats", 2000)

    def wait(self, ok, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("supervisor exited; see %s" % self.log.name)
            s = self.stats()
            if s and ok(s):
                return s
            time.sleep(0.02)
        raise RuntimeError("farm not in the expected state within %d s" % timeout_s)


def identity(model_dir, count, spares=0, spin_us=None, delay_us=200):
    instance = {"device": "cpu", "count": count, "spares": spares}
    if spin_us is not None:
        instance["idle_spin_us"] = spin_us
    return [{"name": "identity", "path": os.path.join(model_dir, "identity.pt"),
             "inputs": [{"dtype": "float32", "shape": [-1, 64]}],
             "instances": [instance], "max_batch_size": 8, "max_queue_delay_us": delay_us}]


def load(bin_dir, endpoint, concurrency, seconds, warmup=1.0):
    argv = [os.path.join(bin_dir, "torchfarm"), "bench", "--endpoint", endpoint,
            "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup),
            "--json", "--model", "identity", "--shape", "1,64"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    step = json.loads(out)["steps"][0]
    return {"rps": step["ok_per_s"], "p50_us": step["latency_us"]["p50"],
            "errors": step["error_count"]}


def replacement_start(args, tmp, launch):
    times = []
    with Farm(args.bin_dir, tmp, "start-" + launch, identity(args.model_dir, 1),
              {"worker_launch": launch}) as farm:
        for _ in range(args.kills):
            worker = farm.stats()["workers"][0]
            os.kill(worker["pid"], signal.SIGKILL)
            s = farm.wait(lambda s: s["workers"][0]["state"] == "ready"
                          and s["workers"][0]["pid"] != worker["pid"], 60)
            times.append(s["workers"][0]["start"]["launch_to_ready_ms"])
            assert s["workers"][0]["start"]["via"] == launch, s["workers"][0]["start"]
            time.sleep(0.3)
    return {"median_ms": statistics.median(times), "all_ms": times}


def children_of(parent):
    """Live children of `parent` from /proc (what `ps --ppid` lists)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            pids.append(int(name))
    return pids


def zygote_places(stats):
    """stats supervisor.zygote.zygotes[]; [] from a supervisor that has one zygote (before issue 27)."""
    return ((stats or {}).get("supervisor", {}).get("zygote") or {}).get("zygotes", [])


def zygote_pids(stats):
    """Every zygote pid the stats name (a supervisor before issue 27 names its one zygote)."""
    zygote = ((stats or {}).get("supervisor", {}).get("zygote") or {})
    return {z["pid"] for z in zygote.get("zygotes", [])} | {zygote.get("pid", -1)}


def is_zygote(pid, known=()):
    """By its name (torchfarm-zygote, issue 27), or as one the stats named."""
    if pid in known:
        return True
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip() == "torchfarm-zygot"
    except OSError:
        return False


def storm_victims(farm, targets):
    """(pids a storm tick may kill: serving workers, every child, or the zygotes; zygote pids)."""
    s = farm.stats() or {"workers": []}
    known = zygote_pids(s)
    if targets == "serving":
        return [w["pid"] for w in s["workers"] if w["role"] == "serving" and w["pid"] > 0], known
    children = children_of(farm.proc.pid)
    if targets == "children":
        return children, known
    return [p for p in children if is_zygote(p, known)], known


def kill_storm(args, tmp, spares, targets="serving"):
    with Farm(args.bin_dir, tmp, "storm-%s-%d" % (targets, spares),
              identity(args.model_dir, 2, spares)) as farm:
        farm.wait(lambda s: s["models"][0]["spares_ready"] == spares, 60)
        farm.wait(lambda s: all(z["state"] == "ready" for z in zygote_places(s)), 60)
        steady = load(args.bin_dir, farm.endpoint, 16, 5)
        stop = threading.Event()
        kills = {"all": 0, "zygotes": 0}

        def killer():
            rng = random.Random(7)
            time.sleep(1.0)  # the generator's warm-up
            end = time.time() + 10
            while time.time() < end and not stop.is_set():
                time.sleep(0.2)
                victims, known = storm_victims(farm, targets)
                if victims:
                    victim = rng.choice(victims)
                    zygote = is_zygote(victim, known)
                    try:
                        os.kill(victim, signal.SIGKILL)
                        kills["all"] += 1
                        kills["zygotes"] += zygote
                    except ProcessLookupError:
                        pass

        t = threading.Thread(target=killer)
        t.start()
        storm = load(args.bin_dir, farm.endpoint, 16, 10)
        stop.set()
        t.join()
        s = farm.stats()
        promotions = s["models"][0]["spare_promotions"]
        zygote_restarts = s["supervisor"]["zygote"]["restarts"]
    return {"targets": targets, "steady_rps": steady["rps"], "storm_rps": storm["rps"],
            "ratio": storm["rps"] / steady["rps"], "kills": kills["all"],
            "zygote_kills": kills["zygotes"], "zygote_restarts": zygote_restarts,
            "promotions": promotions, "errors": storm["errors"]}


def smaps_rollup(pid):
    """RSS, PSS and private (USS) bytes of one process."""
    values = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                values[parts[0].rstrip(":")] = int(parts[1]) * 1024
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmPTE:"):
                values["VmPTE"] = int(line.split()[1]) * 1024
    return {"rss": values.get("Rss", 0), "pss": values.get("Pss", 0),
            "uss": values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
            "page_tables": values.get("VmPTE", 0)}


def zygote_memory(args, tmp):
    with Farm(args.bin_dir, tmp, "memory", identity(args.model_dir, 1)) as farm:
        s = farm.wait(lambda s: all(z["state"] == "ready" for z in zygote_places(s)), 60)
        out = {z["role"]: smaps_rollup(z["pid"]) for z in zygote_places(s)}
        out["worker"] = smaps_rollup(s["workers"][0]["pid"])
    return out


def idle_poll(args, tmp):
    echo_endpoint = "ipc://%s/echo.sock" % tmp
    echo = subprocess.Popen([os.path.join(args.bin_dir, "torchfarm"), "bench", "--echo-server",
                             echo_endpoint], stdout=subprocess.PIPE, text=True)
    echo.stdout.readline()
    try:
        echo_c1 = load(args.bin_dir, echo_endpoint, 1, args.seconds)
    finally:
        echo.send_signal(signal.SIGTERM)
        echo.wait(10)
    out = {"echo_c1_p50_us": echo_c1["p50_us"]}
    for label, spin in (("default", None), ("spin_off", 0)):
        with Farm(args.bin_dir, tmp, "poll-" + label, identity(args.model_dir, 2, 0, spin, delay_us=0)) as farm:
            c1 = load(args.bin_dir, farm.endpoint, 1, args.seconds)
            c64 = load(args.bin_dir, farm.endpoint, 64, args.seconds)
        out[label] = {"c1_p50_us": c1["p50_us"], "c64_rps": c64["rps"]}
    out["c1_p50_vs_echo"] = out["default"]["c1_p50_us"] / echo_c1["p50_us"]
    out["c64_default_vs_spin_off"] = out["default"]["c64_rps"] / out["spin_off"]["c64_rps"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--model-dir", default=None, help="torchfarm-mkmodel --all output")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--json", default=None)
    parser.add_argument("--figures", default="start,storm,poll,memory",
                        help="comma-separated: start, storm, poll, memory")
    args = parser.parse_args()
    args.bin_dir = os.path.abspath(os.path.join(args.build_dir, "bin"))
    tmp = tempfile.mkdtemp(prefix="tf-start-", dir="/tmp")
    if args.model_dir is not None:
        args.model_dir = os.path.abspath(args.model_dir)
    else:
        args.model_dir = os.path.join(tmp, "models")
        subprocess.run([os.path.join(args.bin_dir, "torchfarm-mkmodel"), "--all", args.model_dir],
                       check=True, capture_output=True)
    figures = set(args.figures.split(","))
    rounds = []
    for r in range(args.rounds):
        result = {}
        print("round %d" % (r + 1))
        if "start" in figures:
            z = result["start_zygote"] = replacement_start(args, tmp, "zygote")
            e = result["start_exec"] = replacement_start(args, tmp, "exec")
            print("  replacement launch->ready (median of %d): zygote %.0f ms, exec %.0f ms "
                  "(%.1fx); target <= 300 ms" % (args.kills, z["median_ms"], e["median_ms"],
                                                 e["median_ms"] / z["median_ms"]))
        if "storm" in figures:
            for key, spares, targets in (("storm_0", 0, "serving"), ("storm_1", 1, "serving"),
                                         ("storm_children", 0, "children"),
                                         ("storm_zygotes", 0, "zygotes")):
                s = result[key] = kill_storm(args, tmp, spares, targets)
                print("  kill storm of %s, %d spare: %.0f req/s vs %.0f steady = %.2f (%d kills, "
                      "%d of zygotes, %d zygote restarts, %d promotions, %d errors); target >= "
                      "0.50" % (targets, spares, s["storm_rps"], s["steady_rps"], s["ratio"],
                                s["kills"], s["zygote_kills"], s["zygote_restarts"],
                                s["promotions"], s["errors"]))
                sys.stdout.flush()
        if "poll" in figures:
            p = result["poll"] = idle_poll(args, tmp)
            print("  identity c=1 p50: default %.1f us vs echo %.1f us = %.2fx (spin off %.1f us); "
                  "target <= 1.3x" % (p["default"]["c1_p50_us"], p["echo_c1_p50_us"],
                                      p["c1_p50_vs_echo"], p["spin_off"]["c1_p50_us"]))
            print("  identity c=64: default %.0f req/s vs spin off %.0f req/s = %.3f; target >= "
                  "0.95" % (p["default"]["c64_rps"], p["spin_off"]["c64_rps"],
                            p["c64_default_vs_spin_off"]))
        if "memory" in figures:
            m = result["memory"] = zygote_memory(args, tmp)
            for role in [r for r in ("primary", "standby", "worker") if r in m]:
                print("  %s: RSS %.1f MiB, PSS %.1f MiB, private %.1f MiB, page tables %.1f MiB"
                      % (role, m[role]["rss"] / 2**20, m[role]["pss"] / 2**20,
                         m[role]["uss"] / 2**20, m[role]["page_tables"] / 2**20))
        rounds.append(result)
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f, indent=2)


if __name__ == "__main__":
    main()
