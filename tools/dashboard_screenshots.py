#!/usr/bin/env python3
"""The screenshots of docs/operations.md "Dashboard": the page under load, on a laptop and a phone.

    .venv/bin/python tools/dashboard_screenshots.py [--bin build/bin] [--out docs/images]

A real farm (mlp with 2 workers, convnet with 1; tests/browser/dashboard_browser_check.py's Farm)
under load: mlp at concurrency 4 from 0 to 90 s, convnet at 2 from 20 s to 60 s; one mlp worker
killed with SIGKILL at 35 s, `ctl scale mlp 3` at 45 s. Headless Chromium (the test's driver:
playwright-core, /usr/bin/chromium) keeps the page open from the start and takes dashboard.png
(1280 wide, full page) at 75 s and dashboard-phone.png (390x844 at 2x) at 80 s, both under load.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import shutil
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "browser"))
import dashboard_browser_check as check  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images"))
    args = parser.parse_args()
    check.BIN_DIR = os.path.abspath(args.bin)
    reason = check.skip_reason()
    if reason:
        sys.exit(f"cannot take screenshots: {reason}")
    args.out = os.path.abspath(args.out)  # the driver runs in tests/browser
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="torchfarm-screenshots-")
    farm = check.Farm(tmp)
    driver = None
    loads = []

    def load(model, shape, concurrency, seconds):
        loads.append(subprocess.Popen(
            [os.path.join(check.BIN_DIR, "torchfarm"), "bench", "--endpoint",
             farm.config["endpoint"], "--model", model, "--shape", shape, "--concurrency",
             str(concurrency), "--seconds", str(seconds), "--warmup", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    try:
        farm.wait_ready()
        driver = check.Driver()
        driver("open", url=farm.origin + "/dashboard", width=1280, height=900)
        time.sleep(5)
        start = time.time()
        at = lambda t: time.sleep(max(0, start + t - time.time()))
        load("mlp", "1,256", 4, 90)
        at(20)
        load("convnet", "1,3,32,32", 2, 40)
        at(35)
        victim = next(w for w in farm.stats()["workers"] if w["model"] == "mlp" and w["pid"] > 0)
        os.kill(victim["pid"], signal.SIGKILL)
        at(45)
        farm.cli("ctl", "--admin", farm.config["admin_endpoint"], "scale", "mlp", "3")
        at(75)
        driver("screenshot", path=os.path.join(args.out, "dashboard.png"))
        driver("open", url=farm.origin + "/dashboard", width=390, height=844, scale=2)
        at(80)
        driver("screenshot", path=os.path.join(args.out, "dashboard-phone.png"), full_page=False)
        print(f"wrote {args.out}/dashboard.png and dashboard-phone.png")
    finally:
        for p in loads:
            p.kill()
            p.wait()
        if driver:
            driver.close()
        farm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
