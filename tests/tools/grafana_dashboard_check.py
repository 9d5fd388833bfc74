#!/usr/bin/env python3
"""deploy/grafana/torchfarm.json against the series a real farm exports (issue 33).

    .venv/bin/python tests/tools/grafana_dashboard_check.py SOURCE_DIR BIN_DIR

Checks that the dashboard imports as Grafana expects (a uid, a title, the datasource, job and
instance variables, every panel on the 24-column grid without overlaps and on the ${datasource}
variable) and that every query means something: each torchfarm_* series it names is registered by
the supervisor (a .Name("...") in supervisor/), each selector is narrowed by $job and $instance,
and each label it groups or filters by is a label of that series in the /metrics of a real farm
(torchfarm-supervisor with metrics_endpoint, after a burst of requests and a killed worker). A
series the farm prints only after an event (rollouts, resource errors) is checked against its
registration in the source instead. Standard library only.
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
DASHBOARD = os.path.join(SOURCE_DIR, "deploy", "grafana", "torchfarm.json")
SERIES = re.compile(r"\b(torchfarm_[a-z_]+)(\{[^}]*\})?")
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")
# Labels Prometheus adds when it scrapes, and the histogram's bucket label.
SCRAPE_LABELS = {"job", "instance", "le"}


def queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def registered_series():
    names = set()
    for root, _, files in os.walk(os.path.join(SOURCE_DIR, "supervisor")):
        for name in files:
            if name.endswith(".cc"):
                with open(os.path.join(root, name)) as f:
                    names.update(re.findall(r'\.Name\("(torchfarm_[a-z_]+)"\)', f.read()))
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_real_farm():
    """{series name: set of label names} from a real farm's /metrics."""
    tmp = tempfile.mkdtemp(prefix="torchfarm-grafana-")
    port = free_port()
    try:
        subprocess.run([os.path.join(BIN_DIR, "torchfarm-mkmodel"), "--all", tmp + "/models"],
                       check=True, stdout=subprocess.DEVNULL)
        config = {"endpoint": f"ipc://{tmp}/jobs.sock", "admin_endpoint": f"ipc://{tmp}/admin.sock",
                  "run_dir": tmp + "/run", "metrics_endpoint": f"127.0.0.1:{port}",
                  "models": [{"name": "mlp", "path": tmp + "/models/mlp.pt",
                              "inputs": [{"dtype": "float32", "shape": [-1, 256]}],
                              "instances": [{"device": "cpu", "count": 2, "spares": 1}]}]}
        with open(tmp + "/config.json", "w") as f:
            json.dump(config, f)
        farm = subprocess.Popen([os.path.join(BIN_DIR, "torchfarm-supervisor"), "--config",
                                 tmp + "/config.json"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            bench = [os.path.join(BIN_DIR, "torchfarm"), "bench", "--endpoint", config["endpoint"],
                     "--model", "mlp", "--shape", "1,256", "--concurrency", "2", "--seconds",
                     "0.5", "--warmup", "0", "--io-timeout-ms", "30000"]
            for _ in range(60):  # until the workers are ready and answer
                if subprocess.run(bench, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0:
                    break
                time.sleep(0.5)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        finally:
            farm.send_signal(signal.SIGTERM)
            farm.wait(timeout=30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    labels = {}
    for line in text.decode().splitlines():
        match = re.match(r"(torchfarm_[a-z_]+)(?:\{(.*)\})? ", line)
        if match:
            name = HISTOGRAM_SUFFIX.sub("", match.group(1))
            found = set(re.findall(r'([a-z_]+)="', match.group(2) or ""))
            labels.setdefault(name, set()).update(found)
    return labels


class GrafanaDashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dashboard = json.load(f)
        cls.farm_labels = scrape_real_farm()
        cls.registered = registered_series()

    def test_imports_as_a_dashboard_with_job_and_instance_variables(self):
        d = self.dashboard
        self.assertEqual(d["uid"], "torchfarm-overview")
        self.assertEqual(d["title"], "torchfarm")
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for name in ("job", "instance"):
            self.assertIn("label_values(torchfarm_workers", variables[name]["definition"])
            self.assertTrue(variables[name]["includeAll"] and variables[name]["multi"])

    def test_panels_sit_on_the_grid_without_overlapping(self):
        cells = set()
        for panel in self.dashboard["panels"]:
            g = panel["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, panel["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, f"{panel['title']} overlaps another panel")
                    cells.add((x, y))
            if panel["type"] != "row":
                self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
                self.assertTrue(panel["targets"], f"{panel['title']} has no query")
                self.assertTrue(panel.get("description"), f"{panel['title']} has no description")

    def test_what_the_issue_asks_for_is_on_it(self):
        text = json.dumps(self.dashboard)
        for series in ("torchfarm_requests_total", "torchfarm_request_duration_seconds_bucket",
                       "torchfarm_queue_depth", "torchfarm_workers", "torchfarm_worker_restarts_total",
                       "torchfarm_spare_promotions_total", "torchfarm_rollouts_total",
                       "torchfarm_resource_errors_total"):
            self.assertTrue(series in text, f"no panel shows {series}")
        for query in ("histogram_quantile(0.99", "sum by (model, version, protocol)"):
            self.assertTrue(query in text, f"no panel queries {query}")

    def test_every_series_exists_and_every_selector_names_job_and_instance(self):
        for title, expr in queries(self.dashboard):
            for name, selector in SERIES.findall(expr):
                base = HISTOGRAM_SUFFIX.sub("", name)
                self.assertIn(base, self.registered, f"{title}: {name} is not a torchfarm series")
                self.assertIn('job=~"$job"', selector, f"{title}: {expr}")
                self.assertIn('instance=~"$instance"', selector, f"{title}: {expr}")

    def test_every_label_a_query_uses_is_a_label_of_its_series(self):
        checked = 0
        for title, expr in queries(self.dashboard):
            groups = set()
            for by in re.findall(r"by \(([^)]*)\)", expr):
                groups.update(label.strip() for label in by.split(","))
            for name, selector in SERIES.findall(expr):
                base = HISTOGRAM_SUFFIX.sub("", name)
                if base not in self.farm_labels:
                    continue  # printed only after an event: registration checked above
                have = self.farm_labels[base] | SCRAPE_LABELS
                used = set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", selector)) | groups
                self.assertLessEqual(used, have, f"{title}: {expr} uses labels {used - have} that "
                                                 f"{base} does not have ({sorted(have)})")
                checked += 1
        self.assertGreaterEqual(checked, 20, "most queries checked against a real farm")
        for always in ("torchfarm_requests_total", "torchfarm_workers", "torchfarm_queue_depth",
                       "torchfarm_request_duration_seconds", "torchfarm_batch_size"):
            self.assertIn(always, self.farm_labels, "the real farm printed it")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
