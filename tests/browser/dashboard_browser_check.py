#!/usr/bin/env python3
"""The live dashboard in a real browser against a real farm under load (issue 33).

    python3 tests/browser/dashboard_browser_check.py SOURCE_DIR BIN_DIR

Starts torchfarm-supervisor with http_endpoint and two models (mlp with 2 workers, convnet with
1), opens http://127.0.0.1:PORT/dashboard in Debian's headless Chromium, driven by playwright-core
(tests/browser/dashboard_driver.js; `npm ci` in tests/browser, done by tools/install-deps.sh; no
browser download), and checks that the page:
  - names every model, and shows the ready worker counts and the request counters that
    `torchfarm stats --json` reports (once the load stopped, within one refresh);
  - draws the throughput chart's rise once load starts;
  - shows a killed worker's exit cause (SIGKILL) within 2 s of the kill;
  - asks nothing of any origin but the farm's own;
  - shows the same tables without JavaScript (and to curl), and fits a phone's width.
Skipped (exit 77) without /usr/bin/chromium, node >= 20 or tests/browser/node_modules.
TORCHFARM_DASHBOARD_SCREENSHOTS=DIR also writes dashboard.png (desktop, under load) and
dashboard-phone.png there (docs/operations.md shows them). Standard library only.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

# Set from the command line in __main__ (tools/dashboard_screenshots.py imports this module).
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.path.join(SOURCE_DIR, "build", "bin")
HERE = os.path.dirname(os.path.abspath(__file__))
CHROMIUM = os.environ.get("TORCHFARM_CHROMIUM", "/usr/bin/chromium")
# Absolute: the driver runs in tests/browser.
SCREENSHOTS = os.path.abspath(os.environ["TORCHFARM_DASHBOARD_SCREENSHOTS"]) if os.environ.get(
    "TORCHFARM_DASHBOARD_SCREENSHOTS") else ""


def skip_reason():
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (tools/install-deps.sh installs Debian's chromium)"
    node = shutil.which("node")
    if not node:
        return "no node (tools/install-deps.sh installs nodejs)"
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"],
                           capture_output=True, text=True).stdout.strip()
    if not major.isdigit() or int(major) < 20:
        return f"node {major or '?'} is older than playwright-core's 20"
    if not os.path.isdir(os.path.join(HERE, "node_modules", "playwright-core")):
        return "no tests/browser/node_modules/playwright-core (npm ci in tests/browser)"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    """dashboard_driver.js over its stdin and stdout."""

    def __init__(self):
        self.process = subprocess.Popen(["node", os.path.join(HERE, "dashboard_driver.js")],
                                        cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)

    def __call__(self, cmd, **args):
        self.process.stdin.write(json.dumps(dict(args, cmd=cmd)) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the browser driver ended (exit {self.process.wait()})")
        answer = json.loads(line)
        if not answer["ok"]:
            raise RuntimeError(f"{cmd}: {answer['error']}")
        return answer

    def close(self):
        try:
            self("close")
        finally:
            self.process.stdin.close()
            self.process.wait(timeout=30)


class Farm:
    def __init__(self, tmp):
        self.tmp = tmp
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        subprocess.run([os.path.join(BIN_DIR, "torchfarm-mkmodel"), "--all", tmp + "/models"],
                       check=True, stdout=subprocess.DEVNULL)
        self.config = {
            "endpoint": f"ipc://{tmp}/jobs.sock", "admin_endpoint": f"ipc://{tmp}/admin.sock",
            "run_dir": tmp + "/run", "http_endpoint": f"127.0.0.1:{self.port}",
            "models": [
                {"name": "mlp", "path": tmp + "/models/mlp.pt",
                 "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                 "instances": [{"device": "cpu", "count": 2, "threads": 1}]},
                {"name": "convnet", "path": tmp + "/models/convnet.pt",
                 "inputs": [{"dtype": "float32", "shape": [-1, 3, 32, 32]}],
                 "instances": [{"device": "cpu", "count": 1, "threads": 1}]}]}
        with open(tmp + "/config.json", "w") as f:
            json.dump(self.config, f)
        self.log = open(tmp + "/supervisor.log", "w")
        self.process = subprocess.Popen([os.path.join(BIN_DIR, "torchfarm-supervisor"),
                                         "--config", tmp + "/config.json"],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self.loads = []

    def cli(self, *args, check=True):
        out = subprocess.run([os.path.join(BIN_DIR, "torchfarm"), *args], capture_output=True,
                             text=True, timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"torchfarm {' '.join(args)}: exit {out.returncode}: {out.stderr}")
        return out

    def stats(self):
        return json.loads(self.cli("stats", "--admin", self.config["admin_endpoint"],
                                   "--json").stdout)

    def wait_ready(self, timeout=120):
        give_up = time.time() + timeout
        while time.time() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"the supervisor exited {self.process.returncode}")
            if self.cli("ctl", "--admin", self.config["admin_endpoint"], "health",
                        check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("the farm was not ready within 120 s")

    def start_load(self, seconds):
        """A closed-loop bench on each model, in the background."""
        for model, shape in (("mlp", "1,256"), ("convnet", "1,3,32,32")):
            self.loads.append(subprocess.Popen(
                [os.path.join(BIN_DIR, "torchfarm"), "bench", "--endpoint",
                 self.config["endpoint"], "--model", model, "--shape", shape, "--concurrency",
                 "4", "--seconds", str(seconds), "--warmup", "0", "--io-timeout-ms", "30000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def wait_load(self):
        for load in self.loads:
            load.wait(timeout=120)
        self.loads = []

    def stop(self):
        for load in self.loads:
            load.kill()
            load.wait()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls predicate() until it returns a true value; returns (value, seconds it took)."""
    start = time.time()
    last = None
    while time.time() - start < timeout:
        last = predicate()
        if last:
            return last, time.time() - start
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def ready_counts(stats):
    counts = {}
    for w in stats["workers"]:
        if w.get("role", "serving") != "serving":
            continue
        ready, total = counts.get(w["model"], (0, 0))
        counts[w["model"]] = (ready + (w["state"] in ("ready", "busy")), total + 1)
    return counts


class DashboardBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="torchfarm-dashboard-")
        cls.farm = Farm(cls.tmp)
        cls.driver = None
        try:
            cls.farm.wait_ready()
            cls.driver = Driver()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.driver:
            cls.driver.close()
        cls.farm.stop()
        if os.environ.get("TORCHFARM_KEEP_TMP"):
            print(f"kept {cls.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def state(self):
        return self.driver("state")

    def model_rows(self, state):
        return {m["name"]: m["cells"] for m in state["state"]["models"]}

    def test_1_the_live_page_under_load(self):
        farm, driver = self.farm, self.driver
        self.assertEqual(driver("open", url=farm.origin + "/dashboard")["status"], 200)
        # The script takes over: "live" and charts with points.
        wait_for("the page polls the farm",
                 lambda: self.state()["state"]["liveClass"] == "live", 10)
        first = wait_for("the charts have a few points",
                         lambda: (lambda s: s if s["state"]["charts"].get("throughput", {})
                                  .get("points", 0) >= 2 else None)(self.state()), 10)[0]
        names = set(self.model_rows(first))
        self.assertEqual(names, {"mlp", "convnet"}, "the page names every model")
        self.assertFalse(first["state"]["chartsHidden"])
        self.assertEqual(first["state"]["charts"]["throughput"]["latest"], 0, "no load yet")

        # Load starts: the throughput chart rises within a few refreshes.
        farm.start_load(seconds=6)
        risen, took = wait_for(
            "the throughput chart rises once load starts",
            lambda: (lambda s: s if s["state"]["charts"]["throughput"]["latest"] > 0 else None)(
                self.state()), 6)
        print(f"throughput chart rose {took:.1f} s after the load started "
              f"({risen['state']['charts']['throughput']['latest']} req/s)", file=sys.stderr)
        rows = self.model_rows(risen)
        self.assertGreater(float(rows["mlp"]["rps"]), 0)
        if SCREENSHOTS:
            time.sleep(3)  # a few seconds of load in the charts
            os.makedirs(SCREENSHOTS, exist_ok=True)
            driver("screenshot", path=os.path.join(SCREENSHOTS, "dashboard.png"))
        farm.wait_load()

        # Load over: within one refresh (and one throughput second) the page shows what `stats`
        # reports: the request counters and ready workers of each model, every worker.
        time.sleep(2.5)
        stats = farm.stats()
        page = self.state()
        rows = self.model_rows(page)
        for model in stats["models"]:
            self.assertEqual(rows[model["name"]]["requests"], str(model["requests"]),
                             f"{model['name']}: requests shown vs stats")
            self.assertGreater(model["requests"], 0)
        for name, (ready, total) in ready_counts(stats).items():
            self.assertEqual(rows[name]["workers"], f"{ready}/{total}", f"{name}: ready/total")
        shown = {w["id"]: w["cells"] for w in page["state"]["workers"]}
        self.assertEqual(set(shown), {w["id"] for w in stats["workers"]})
        for w in stats["workers"]:
            self.assertEqual(shown[w["id"]]["pid"], str(w["pid"]))
            self.assertEqual(shown[w["id"]]["requests"], str(w["requests"]))

        # A killed worker: its exit cause on the page within 2 s.
        victim = next(w for w in stats["workers"] if w["model"] == "mlp" and w["pid"] > 0)
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.time()

        def cause_shown():
            s = self.state()["state"]
            row = next((w for w in s["workers"] if w["id"] == victim["id"]), None)
            in_row = row and "SIGKILL" in row["cells"].get("last_exit", "")
            in_events = any(f"pid {victim['pid']} exited: killed by SIGKILL" in e["text"]
                            for e in s["events"])
            return s if in_row and in_events else None
        _, took = wait_for("the killed worker's exit cause", cause_shown, 4, interval=0.05)
        took = time.time() - killed_at
        print(f"exit cause shown {took:.2f} s after the kill", file=sys.stderr)
        self.assertLessEqual(took, 2.0, "a killed worker's cause within 2 s")

        # Nothing outside the farm's own origin, and no script error.
        final = self.state()
        outside = [u for u in final["requests"] if not u.startswith(farm.origin + "/")]
        self.assertEqual(outside, [], "requests outside the farm's origin")
        self.assertTrue(any("/v2/torchfarm/stats" in u for u in final["requests"]))
        self.assertEqual(final["console_errors"], [])
        self.assertLessEqual(final["state"]["scrollWidth"], final["state"]["innerWidth"] + 1,
                             "the page itself does not scroll sideways (tables do, inside)")

    def test_2_without_javascript_and_on_a_phone(self):
        farm, driver = self.farm, self.driver
        stats = farm.stats()
        # curl: the server-rendered tables.
        html = urllib.request.urlopen(farm.origin + "/dashboard", timeout=10).read().decode()
        for model in stats["models"]:
            self.assertIn(f'<tr data-model="{model["name"]}"', html)
        # A browser with JavaScript off: the same tables, no charts, no request but the page's.
        driver("open", url=farm.origin + "/dashboard", javascript=False)
        s = self.state()
        self.assertEqual(set(self.model_rows(s)), {m["name"] for m in stats["models"]})
        self.assertTrue(s["state"]["chartsHidden"])
        self.assertEqual(len(s["state"]["workers"]), len(stats["workers"]))
        self.assertIn("snapshot", s["state"]["live"])
        # A phone: 390 px wide, the charts one above the other within the width.
        driver("open", url=farm.origin + "/dashboard", width=390, height=844, scale=2)
        phone = wait_for("the phone's page draws its charts",
                         lambda: (lambda st: st if st["state"]["charts"].get("throughput", {})
                                  .get("points", 0) >= 1 else None)(self.state()), 10)[0]["state"]
        self.assertLessEqual(phone["scrollWidth"], 391, "no sideways scroll of the page")
        for chart in phone["charts"].values():
            self.assertLessEqual(chart["width"], 390)
        if SCREENSHOTS:
            driver("screenshot", path=os.path.join(SCREENSHOTS, "dashboard-phone.png"),
                   full_page=False)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        SOURCE_DIR = os.path.abspath(sys.argv.pop(1))
    if len(sys.argv) > 1:
        BIN_DIR = os.path.abspath(sys.argv.pop(1))
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], "-v"])
