#!/usr/bin/python3
"""torchfarm benchmark suite: starts farms from generated configs, measures, prints one table and
writes docs/benchmarks.md. Run by `make bench` (Release build in build-release).

    .venv/bin/python bench/run_suite.py --build-dir build-release --out docs/benchmarks.md [--quick]

Steps (see docs/benchmarks.md for what each figure means):
  1. overhead    identity [1,256] float32: farm vs in-process forward vs bare ZeroMQ echo (ipc, tcp)
  2. throughput  mlp, convnet, resnet18 (when tools/export_torchvision.py can write it), batch-1
                 requests at concurrency 16: 1 and 2 workers, batching on and off, vs in-process
  3. bandwidth   one 16 MiB float32 tensor round trip vs memcpy: data frames, and client shared
                 memory (`torchfarm bench --shm`) against the same farm
  4. memory      supervisor and worker RSS/PSS vs one in-process model
  5. micro       Google Benchmark: ring, batch assembly, header parse/serialise, memcpy
Every figure keeps the command that made it; the farm configs are printed in the report.
Needs python3-zmq (admin socket). Uses only this machine; one step at a time.
"""
import argparse
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_report  # noqa: E402  (bench/suite_report.py: tables, targets, markdown)


class Recorder:
    """Runs commands and numbers them, so every figure can cite the command that made it."""

    def __init__(self, bin_dir, tmp):
        self.bin_dir = bin_dir
        self.tmp = tmp
        self.commands = []  # (id, text)

    def cite(self, argv):
        text = " ".join(shlex.quote(a) for a in argv)
        text = text.replace(self.bin_dir + "/", "").replace(self.tmp + "/", "$TMP/")
        text = text.replace(ROOT + "/", "")
        self.commands.append((len(self.commands) + 1, text))
        return "C%d" % len(self.commands)

    def run_json(self, argv, timeout=600):
        ref = self.cite(argv)
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
        if proc.returncode not in (0, 1):
            raise RuntimeError("%s failed (%d): %s" % (argv[0], proc.returncode, proc.stderr[-2000:]))
        return json.loads(proc.stdout), ref


def admin_call(endpoint, cmd, timeout_ms=2000):
    context = zmq.Context.instance()
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
    socket.connect(endpoint)
    try:
        socket.send_json({"cmd": cmd})
        return socket.recv_json()
    except zmq.Again:
        return None
    finally:
        socket.close()


def cpu_seconds(pid):
    """User + system CPU time of a process and all its threads so far."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_memory_kib(pid):
    """RSS (with its anon/file/shmem parts) and PSS of a process, in KiB."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(value.split()[0])
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["Pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def _tail(path, lines=5):
    with open(path) as f:
        return " | ".join(f.read().splitlines()[-lines:])


class Farm:
    """A supervisor on a generated config; a context manager that stops it with SIGTERM."""

    def __init__(self, suite, name, models, transport="ipc"):
        self.suite = suite
        self.name = name
        self.dir = os.path.join(suite.tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        if transport == "tcp":
            self.endpoint = "tcp://127.0.0.1:%d" % suite.next_port()
        else:
            self.endpoint = "ipc://%s/jobs.sock" % self.dir
        self.admin = "ipc://%s/run/admin.sock" % self.dir
        self.config = {"endpoint": self.endpoint, "admin_endpoint": self.admin,
                       "run_dir": self.dir + "/run", "models": models}
        self.config_path = os.path.join(self.dir, "config.json")
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=2)
        suite.configs[name] = self.config
        self.proc = None

    def __enter__(self):
        argv = [self.suite.bin("torchfarm-supervisor"), "--config", self.config_path,
                "--log-level", "warn"]
        self.log = open(os.path.join(self.dir, "supervisor.log"), "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError("supervisor %s exited: %s" % (self.name, _tail(self.log.name)))
            health = admin_call(self.admin, "health", 500)
            if health and all(m["ready_workers"] == m["workers"] for m in health["models"]):
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("farm %s not ready in 120 s: %s" % (self.name, _tail(self.log.name)))

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def servers(self):
        stats = admin_call(self.admin, "stats")
        return {"supervisor": [self.proc.pid],
                "workers": [w["pid"] for w in stats["workers"] if w.get("pid", -1) > 0]}

    def memory(self):
        # Read after the requests the generator left in flight have been answered: a 16 MiB request
        # still being received or copied would otherwise count as the farm's resting memory.
        time.sleep(1.0)
        stats = admin_call(self.admin, "stats")
        workers = [proc_memory_kib(w["pid"]) for w in stats["workers"] if w.get("pid", -1) > 0]
        return {"supervisor": proc_memory_kib(self.proc.pid), "workers": workers}


class EchoServer:
    def __init__(self, suite, endpoint):
        self.suite = suite
        self.endpoint = endpoint

    def __enter__(self):
        argv = [self.suite.bin("torchfarm"), "bench", "--echo-server", self.endpoint]
        self.suite.recorder.cite(argv)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "ready" not in line:
            self.proc.kill()
            raise RuntimeError("echo server did not start: %r" % line)
        return self

    def servers(self):
        return {"echo": [self.proc.pid]}

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


def model_entry(name, path, shape, workers, max_batch, delay_us=0, threads=1, **extra):
    entry = {"name": name, "path": path,
             "inputs": [{"dtype": "float32", "shape": [-1] + list(shape[1:])}],
             "instances": [{"device": "cpu", "count": workers, "threads": threads}],
             "max_batch_size": max_batch, "max_queue_delay_us": delay_us}
    entry.update(extra)
    return entry


class Suite:
    def __init__(self, args):
        self.args = args
        self.bin_dir = os.path.abspath(os.path.join(args.build_dir, "bin"))
        self.tmp = tempfile.mkdtemp(prefix="torchfarm-bench-")
        self.models_dir = os.path.join(self.tmp, "models")
        self.recorder = Recorder(self.bin_dir, self.tmp)
        self.configs = {}
        self.results = {}
        self.notes = []
        self.port = 25555
        self.seconds = 1.0 if args.quick else args.seconds
        self.warmup = 0.5 if args.quick else args.warmup

    def bin(self, name):
        return os.path.join(self.bin_dir, name)

    def next_port(self):
        self.port += 1
        return self.port

    def bench(self, endpoint, model, shape, concurrency, admin=None, servers=None, extra=()):
        """One `torchfarm bench` per concurrency, so each step's CPU time is its own: the
        generator's (this process's reaped child) and the servers' (/proc of their pids), per
        request sent. `servers`: {"supervisor": [pid], "workers": [pids]} or {"echo": [pid]}."""
        steps = []
        for c in concurrency:
            argv = [self.bin("torchfarm"), "bench", "--endpoint", endpoint, "--model", model,
                    "--shape", ",".join(str(d) for d in shape), "--concurrency", str(c),
                    "--seconds", str(self.seconds), "--warmup", str(self.warmup), "--json"]
            if admin:
                argv += ["--admin-endpoint", admin]
            argv += list(extra)
            servers = servers or {}
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            before = {role: sum(cpu_seconds(p) for p in pids) for role, pids in servers.items()}
            report, ref = self.recorder.run_json(argv)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            step = report["steps"][0]
            step["cmd"] = ref
            sent = max(step["sent"], 1)
            cpu = {"generator": (after.ru_utime + after.ru_stime - children.ru_utime -
                                 children.ru_stime) * 1e6 / sent}
            for role, pids in servers.items():
                cpu[role] = (sum(cpu_seconds(p) for p in pids) - before[role]) * 1e6 / sent
            step["cpu_us_per_request"] = cpu
            steps.append(step)
        return steps

    def inprocess(self, model_path, shape, batches, threads, seconds=None):
        argv = [self.bin("torchfarm-bench-inprocess"), "--model", model_path,
                "--shape", ",".join(str(d) for d in shape),
                "--batch", ",".join(str(b) for b in batches), "--threads", str(threads),
                "--seconds", str(seconds or min(self.seconds, 2.0)), "--warmup", str(self.warmup)]
        report, ref = self.recorder.run_json(argv)
        report["cmd"] = ref
        return report

    def log(self, message):
        print("[%s] %s" % (time.strftime("%H:%M:%S"), message), flush=True)

    # ---- steps -------------------------------------------------------------------------------

    def write_models(self):
        os.makedirs(self.models_dir, exist_ok=True)
        argv = [self.bin("torchfarm-mkmodel"), "--all", self.models_dir]
        self.recorder.cite(argv)
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        argv = [sys.executable, os.path.join(ROOT, "tools/export_torchvision.py"),
                "--out", os.path.join(self.models_dir, "resnet18.pt")]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0:
            self.recorder.cite(argv)
        else:
            self.notes.append("ResNet-18 skipped: " + (proc.stderr.strip().splitlines() or ["?"])[-1])

    def step_overhead(self):
        self.log("overhead: identity [1,256]")
        identity = os.path.join(self.models_dir, "identity.pt")
        shape = [1, 256]
        result = {"inprocess": self.inprocess(identity, shape, [1], 1)}
        for transport in ("ipc", "tcp"):
            if transport == "tcp":
                endpoint = "tcp://127.0.0.1:%d" % self.next_port()
            else:
                endpoint = "ipc://%s/echo.sock" % self.tmp
            with EchoServer(self, endpoint) as server:
                echo = self.bench(endpoint, "identity", shape, [1, 64], servers=server.servers())
            farm_model = model_entry("identity", identity, shape, self.args.identity_workers, 64)
            with Farm(self, "identity-" + transport, [farm_model], transport) as farm:
                farm_steps = self.bench(farm.endpoint, "identity", shape, [1, 64], farm.admin,
                                        farm.servers())
                result.setdefault("memory", farm.memory())
            # The latency configuration: the worker polls its ring for 300 us after answering
            # instead of sleeping at once (instances[].idle_spin_us). Since issue 19 the default
            # is the same window, adaptive (worker/adaptive_spin.h); bench/worker_start_bench.py
            # compares it with idle_spin_us 0.
            spin_model = model_entry("identity", identity, shape, self.args.identity_workers, 64)
            spin_model["instances"][0]["idle_spin_us"] = 300
            with Farm(self, "identity-spin-" + transport, [spin_model], transport) as farm:
                farm_spin = self.bench(farm.endpoint, "identity", shape, [1], farm.admin,
                                       farm.servers())
            nobatch = model_entry("identity", identity, shape, self.args.identity_workers, 1)
            with Farm(self, "identity-nobatch-" + transport, [nobatch], transport) as farm:
                farm_off = self.bench(farm.endpoint, "identity", shape, [64], farm.admin,
                                      farm.servers())
            result[transport] = {"echo": echo, "farm": farm_steps, "farm_nobatch": farm_off,
                                 "farm_spin": farm_spin}
        self.results["overhead"] = result

    def throughput_models(self):
        models = [("mlp", [1, 256], [1, 2, 4, 8, 16, 32, 64]),
                  ("convnet", [1, 3, 32, 32], [1, 2, 4, 8, 16, 32, 64])]
        if os.path.exists(os.path.join(self.models_dir, "resnet18.pt")):
            models.append(("resnet18", [1, 3, 224, 224], [1, 2, 4, 8, 16]))
        return models

    def step_throughput(self):
        cores = os.cpu_count()
        out = {}
        for name, shape, batches in self.throughput_models():
            self.log("throughput: %s" % name)
            path = os.path.join(self.models_dir, name + ".pt")
            # All cores as intra-op threads is the baseline the issue names; one thread is run too
            # because OpenMP's barriers collapse when other work shares the cores, and the
            # baseline must be the best one process can do.
            runs = [self.inprocess(path, shape, batches, threads) for threads in sorted({cores, 1}, reverse=True)]
            runs.sort(key=lambda r: r["best"]["rows_per_s"], reverse=True)
            entry = {"inprocess": runs[0], "inprocess_runs": runs, "farm": []}
            for workers in (1, 2):
                for batching in (True, False):
                    max_batch = 16 if batching else 1
                    delay = self.args.batch_delay_us if batching else 0
                    model = model_entry(name, path, shape, workers, max_batch, delay)
                    label = "%s-%dw-%s" % (name, workers, "batch" if batching else "nobatch")
                    with Farm(self, label, [model]) as farm:
                        step = self.bench(farm.endpoint, name, shape, [16], farm.admin,
                                          farm.servers())[0]
                        if name == "convnet" and workers == 2 and batching:
                            self.results["memory_convnet"] = farm.memory()
                    step.update({"workers": workers, "batching": batching, "config": label})
                    entry["farm"].append(step)
            out[name] = entry
        self.results["throughput"] = out

    def step_bandwidth(self):
        self.log("bandwidth: 16 MiB round trip")
        identity = os.path.join(self.models_dir, "identity.pt")
        shape = [1, 4 << 20]  # 4 Mi float32 = 16 MiB
        endpoint = "ipc://%s/echo16.sock" % self.tmp
        with EchoServer(self, endpoint) as server:
            echo = self.bench(endpoint, "identity", shape, [1], servers=server.servers())[0]
        model = model_entry("identity", identity, shape, 1, 1, slot_bytes=17 << 20,
                            max_inflight_per_worker=1, ring_slots=2)
        with Farm(self, "identity-16mib", [model]) as farm:
            step = self.bench(farm.endpoint, "identity", shape, [1], farm.admin, farm.servers())[0]
            # Resting memory after the data-frames run, as before the shared-memory row existed;
            # the client regions of the --shm run are released when its step ends.
            memory = farm.memory()
            shm_step = self.bench(farm.endpoint, "identity", shape, [1], farm.admin, farm.servers(),
                                  extra=["--shm"])[0]
        self.results["bandwidth"] = {"bytes": 16 << 20, "echo": echo, "farm": step,
                                     "farm_shm": shm_step, "memory": memory}

    def step_micro(self):
        self.log("micro-benchmarks")
        argv = [self.bin("torchfarm-microbench"), "--benchmark_format=json",
                "--benchmark_min_time=%s" % ("0.05" if self.args.quick else "0.2")]
        report, ref = self.recorder.run_json(argv)
        self.results["micro"] = {"benchmarks": report["benchmarks"], "cmd": ref,
                                 "context": report.get("context", {})}

    def run(self):
        started = time.time()
        self.results["loadavg_start"] = os.getloadavg()
        self.write_models()
        self.step_overhead()
        self.step_throughput()
        self.step_bandwidth()
        self.step_micro()
        self.results["elapsed_s"] = time.time() - started
        self.results["loadavg_end"] = os.getloadavg()
        self.log("done in %.0f s" % self.results["elapsed_s"])


def _string_keys(value):
    if isinstance(value, dict):
        return {str(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_string_keys(v) for v in value]
    return value


def main():
    parser = argparse.ArgumentParser(description="torchfarm benchmark suite")
    parser.add_argument("--build-dir", default="build-release")
    parser.add_argument("--out", default="docs/benchmarks.md")
    parser.add_argument("--json-out", default="", help="also write the raw results here")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per step")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="1 s steps, for a dry run")
    parser.add_argument("--identity-workers", type=int, default=1)
    parser.add_argument("--batch-delay-us", type=int, default=0,
                        help="max_queue_delay_us of the batching-on configs")
    parser.add_argument("--from-json", default="",
                        help="re-render the report from a --json-out file instead of measuring")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        machine, results = saved["machine"], saved["results"]
        configs, commands, notes = saved["configs"], saved["commands"], saved["notes"]
    else:
        suite = Suite(args)
        try:
            suite.run()
        finally:
            subprocess.run(["rm", "-rf", suite.tmp])
        machine = suite_report.machine_info(suite.results)
        results, commands, notes = suite.results, suite.recorder.commands, suite.notes
        configs = json.loads(json.dumps(suite.configs).replace(suite.tmp, "$TMP"))
    summary = suite_report.summarize(results)
    print(suite_report.console_table(summary))
    markdown = suite_report.markdown(machine, summary, results, configs, commands, notes, args,
                                     os.path.join(ROOT, "bench/analysis.md"))
    with open(args.out, "w") as f:
        f.write(markdown)
    if args.json_out and not args.from_json:
        with open(args.json_out, "w") as f:
            json.dump({"machine": machine, "summary": _string_keys(summary), "results": results,
                       "configs": configs, "commands": commands, "notes": notes}, f, indent=2)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
