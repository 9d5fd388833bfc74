#!/usr/bin/env python3
"""What the live dashboard costs the supervisor (issue 33; docs/benchmarks.md "Dashboard cost").

    python3 bench/dashboard_cost.py [--bin build-release/bin] [--seconds 30] [--rounds 3]
                                    [--dashboards 5] [--browsers] [--json]

Starts torchfarm-supervisor with http_endpoint and mlp (2 CPU workers, 1 thread each), then:
  1. idle: the supervisor's CPU (utime + stime of all its threads, /proc/PID/stat) over --seconds
     with no dashboard, then with --dashboards open at the page's 1 s refresh;
  2. c=64: `torchfarm bench --concurrency 64` on mlp for --seconds, without and with the
     dashboards, alternating --rounds times (the VM's noise shows in the spread).
A dashboard is a poller that does what dashboard.js does: GET /dashboard, its script and style
once, then GET /v2/torchfarm/stats?events_after=N once a second. --browsers also measures the
idle case with that many real headless Chromium pages (/usr/bin/chromium) instead; Chromium's own
CPU is not counted (the goal is the supervisor's). Standard library only.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Poller(threading.Thread):
    """One open dashboard, as dashboard.js polls."""

    def __init__(self, origin, stop):
        super().__init__(daemon=True)
        self.origin, self.stop, self.polls, self.errors = origin, stop, 0, 0

    def run(self):
        for path in ("/dashboard", "/dashboard/dashboard.js", "/dashboard/dashboard.css"):
            urllib.request.urlopen(self.origin + path, timeout=10).read()
        last = 0
        while not self.stop.is_set():
            started = time.time()
            try:
                url = self.origin + "/v2/torchfarm/stats" + (f"?events_after={last}" if last else "")
                status = json.loads(urllib.request.urlopen(url, timeout=10).read())
                last = max(last, status.get("last_event", 0))
                self.polls += 1
            except Exception:
                self.errors += 1
            self.stop.wait(max(0.1, 1.0 - (time.time() - started)))


def measure_idle(pid, seconds):
    before, t0 = cpu_seconds(pid), time.time()
    time.sleep(seconds)
    return 100.0 * (cpu_seconds(pid) - before) / (time.time() - t0)


def bench(bin_dir, endpoint, seconds, pid):
    """(requests/s, the supervisor's CPU microseconds per request) of one c=64 run."""
    cpu_before = cpu_seconds(pid)
    out = subprocess.run([os.path.join(bin_dir, "torchfarm"), "bench", "--endpoint", endpoint,
                          "--model", "mlp", "--shape", "1,256", "--concurrency", "64",
                          "--seconds", str(seconds), "--warmup", "1", "--json"],
                         capture_output=True, text=True, check=True)
    cpu = cpu_seconds(pid) - cpu_before
    result = json.loads(out.stdout)
    step = result["steps"][0] if "steps" in result else result
    requests = step["requests_per_s"] * seconds
    return step["requests_per_s"], 1e6 * cpu / max(1.0, requests)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default="build/bin")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dashboards", type=int, default=5)
    parser.add_argument("--browsers", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bin_dir = os.path.abspath(args.bin)
    tmp = tempfile.mkdtemp(prefix="torchfarm-dashboard-cost-")
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    subprocess.run([os.path.join(bin_dir, "torchfarm-mkmodel"), "--all", tmp + "/models"],
                   check=True, stdout=subprocess.DEVNULL)
    config = {"endpoint": f"ipc://{tmp}/jobs.sock", "admin_endpoint": f"ipc://{tmp}/admin.sock",
              "run_dir": tmp + "/run", "http_endpoint": f"127.0.0.1:{port}",
              "models": [{"name": "mlp", "path": tmp + "/models/mlp.pt",
                          "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                          "instances": [{"device": "cpu", "count": 2, "threads": 1}]}]}
    with open(tmp + "/config.json", "w") as f:
        json.dump(config, f)
    farm = subprocess.Popen([os.path.join(bin_dir, "torchfarm-supervisor"), "--config",
                             tmp + "/config.json", "--log-level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {"seconds": args.seconds, "dashboards": args.dashboards, "cores": os.cpu_count()}
    browsers = []
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(origin + "/v2/health/ready", timeout=2).status == 200:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        bench(bin_dir, config["endpoint"], 2, farm.pid)  # warm the workers up
        time.sleep(2)

        def with_dashboards(run):
            stop = threading.Event()
            pollers = [Poller(origin, stop) for _ in range(args.dashboards)]
            for p in pollers:
                p.start()
            time.sleep(2)  # past the page loads
            try:
                return run(), sum(p.polls for p in pollers), sum(p.errors for p in pollers)
            finally:
                stop.set()
                for p in pollers:
                    p.join()

        results["idle_cpu_percent_none"] = measure_idle(farm.pid, args.seconds)
        cpu, polls, errors = with_dashboards(lambda: measure_idle(farm.pid, args.seconds))
        results["idle_cpu_percent_dashboards"] = cpu
        results["idle_polls"], results["idle_poll_errors"] = polls, errors
        if args.browsers:
            chromium = os.environ.get("TORCHFARM_CHROMIUM", "/usr/bin/chromium")
            for i in range(args.dashboards):
                browsers.append(subprocess.Popen(
                    [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", f"--user-data-dir={tmp}/chromium-{i}",
                     "--remote-debugging-port=0", origin + "/dashboard"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(5)
            results["idle_cpu_percent_browsers"] = measure_idle(farm.pid, args.seconds)
            for b in browsers:
                b.terminate()
                b.wait(timeout=10)
            browsers = []
        without, with_ = [], []
        for _ in range(args.rounds):
            without.append(bench(bin_dir, config["endpoint"], args.seconds, farm.pid))
            with_.append(with_dashboards(lambda: bench(bin_dir, config["endpoint"],
                                                        args.seconds, farm.pid))[0])
        results["c64_rps_none"] = [r for r, _ in without]
        results["c64_rps_dashboards"] = [r for r, _ in with_]
        results["c64_cpu_us_per_request_none"] = [c for _, c in without]
        results["c64_cpu_us_per_request_dashboards"] = [c for _, c in with_]
        results["load_average"] = os.getloadavg()
    finally:
        for b in browsers:
            b.kill()
        farm.send_signal(signal.SIGTERM)
        farm.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    mean = lambda xs: sum(xs) / len(xs)
    print(f"supervisor CPU at idle, % of one core over {args.seconds:.0f} s: "
          f"{results['idle_cpu_percent_none']:.2f} without, "
          f"{results['idle_cpu_percent_dashboards']:.2f} with {args.dashboards} dashboards "
          f"({results['idle_polls']} status polls, {results['idle_poll_errors']} errors)")
    if "idle_cpu_percent_browsers" in results:
        print(f"  with {args.dashboards} headless Chromium pages: "
              f"{results['idle_cpu_percent_browsers']:.2f}")
    for key, label, digits in (("c64_rps", "req/s", 0),
                               ("c64_cpu_us_per_request", "supervisor CPU us/request", 2)):
        a, b = results[key + "_none"], results[key + "_dashboards"]
        print(f"c=64 mlp {label}, {args.rounds} rounds of {args.seconds:.0f} s: without "
              f"{mean(a):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in a)}), with "
              f"{mean(b):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in b)})")


if __name__ == "__main__":
    main()
