#!/usr/bin/python3
"""AOTInductor vs TorchScript on LibTorch 2.15 vs TorchScript on Debian's LibTorch 1.13 (issue 29):
the same models served by the same supervisor, 2 workers x 1 intra-op thread, batching max 16 /
2 ms, batch-1 requests from `torchfarm bench` (ZeroMQ) at concurrency 16; and how long a worker
takes from launch to ready in each format, exec'd and forked from the zygote.

    /usr/bin/python3 bench/aoti_bench.py --build-dir build --debian-build-dir build-debian \\
        [--models mlp,transformer,resnet18] [--rounds 3] [--seconds 5] [--json FILE]

Interpreters: this script runs under Debian's /usr/bin/python3 (it needs only pyzmq). It calls
.venv/bin/python tools/export_model.py for the 2.15 files (TorchScript and .pt2) and
/usr/bin/python3 tools/export_model.py --formats torchscript for the 1.13 ones (Debian's
python3-torch 1.13: a file saved by 2.15 may not load in 1.13). The 1.13 worker is
--debian-build-dir's torchfarm-worker (make test-debian), given to the farm as `worker_binary`;
the supervisor is the default build's for every variant. Rounds alternate the variants, so a
figure is never taken while another one's farm runs; ratios are within one round, medians over
rounds.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_suite  # noqa: E402  (Suite, Farm, admin_call, model_entry)

ROOT = run_suite.ROOT
SHAPES = {"mlp": [1, 256], "convnet": [1, 3, 32, 32], "transformer": [1, 32, 128],
          "resnet18": [1, 3, 224, 224]}
VARIANTS = ("aoti", "ts215", "ts113")


def export(python, out, models, formats):
    argv = [python, os.path.join(ROOT, "tools/export_model.py"), "--out", out,
            "--models", ",".join(models), "--formats", formats, "--skip-existing"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError("export failed: %s\n%s" % (" ".join(argv), proc.stdout[-3000:]))


def variant_model(variant, model, dirs):
    if variant == "aoti":
        return os.path.join(dirs["venv"], model + ".pt2")
    if variant == "ts215":
        return os.path.join(dirs["venv"], model + ".pt")
    return os.path.join(dirs["debian"], model + ".pt")


def farm_models(variant, model, dirs, workers=2):
    return [run_suite.model_entry(model, variant_model(variant, model, dirs), SHAPES[model],
                                  workers, 16, delay_us=2000)]


class VariantFarm(run_suite.Farm):
    """A Farm whose workers may be another build's binary, started with a chosen launch mode."""

    def __init__(self, suite, name, models, worker_binary=None, launch="zygote"):
        super().__init__(suite, name, models)
        if worker_binary:
            self.config["worker_binary"] = worker_binary
        self.config["worker_launch"] = launch
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=2)


def throughput(suite, variant, model, dirs, debian_worker, concurrency):
    worker = debian_worker if variant == "ts113" else None
    with VariantFarm(suite, "%s-%s" % (variant, model), farm_models(variant, model, dirs),
                     worker) as farm:
        step = suite.bench(farm.endpoint, model, SHAPES[model], [concurrency], admin=farm.admin,
                           servers=farm.servers())[0]
    return {"ok_per_s": step["ok_per_s"], "p50_us": step["latency_us"]["p50"],
            "p99_us": step["latency_us"]["p99"], "errors": step.get("error_count", 0),
            "sent": step["sent"], "cmd": step["cmd"],
            "error_detail": step.get("errors")}


def wait_ready(admin, workers, deadline_s=120):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        health = run_suite.admin_call(admin, "health", 200)
        if health and all(m["ready_workers"] == workers for m in health["models"]):
            return True
        time.sleep(0.005)
    return False


def launch_to_ready(suite, variant, model, dirs, debian_worker, launch, kills=3):
    """SIGKILL the serving worker and time until its replacement reports ready, `kills` times."""
    worker = debian_worker if variant == "ts113" else None
    times = []
    with VariantFarm(suite, "start-%s-%s-%s" % (launch, variant, model),
                     farm_models(variant, model, dirs, workers=1), worker, launch) as farm:
        for _ in range(kills):
            stats = run_suite.admin_call(farm.admin, "stats")
            pid = [w["pid"] for w in stats["workers"] if w.get("pid", -1) > 0][0]
            start = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            # The health answer still says ready until the supervisor has seen the death.
            while True:
                health = run_suite.admin_call(farm.admin, "health", 200)
                if health and health["models"][0]["ready_workers"] == 0:
                    break
                if time.monotonic() - start > 10:
                    raise RuntimeError("the supervisor never saw worker %d die" % pid)
                time.sleep(0.002)
            if not wait_ready(farm.admin, 1):
                raise RuntimeError("no replacement worker for %s/%s/%s" % (launch, variant, model))
            times.append((time.monotonic() - start) * 1000)
            time.sleep(1.5)  # past the restart policy's quick-restart window
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--debian-build-dir", default="build-debian")
    parser.add_argument("--models", default="mlp,transformer,resnet18")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-start", action="store_true", help="skip launch -> ready")
    parser.add_argument("--json", default="")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    models = args.models.split(",")
    variants = args.variants.split(",")
    suite = run_suite.Suite(argparse.Namespace(build_dir=args.build_dir, quick=args.quick,
                                               seconds=args.seconds, warmup=args.warmup))
    debian_worker = os.path.abspath(os.path.join(args.debian_build_dir, "bin/torchfarm-worker"))
    if "ts113" in variants and not os.access(debian_worker, os.X_OK):
        sys.exit("aoti_bench: %s is missing: run `make test-debian` (or drop ts113 from "
                 "--variants)" % debian_worker)
    dirs = {"venv": os.path.join(ROOT, "build", "aoti-bench-models", "venv"),
            "debian": os.path.join(ROOT, "build", "aoti-bench-models", "debian")}
    t0 = time.monotonic()
    export(os.path.join(ROOT, ".venv/bin/python"), dirs["venv"], models, "torchscript,aoti")
    if "ts113" in variants:
        export("/usr/bin/python3", dirs["debian"], models, "torchscript")
    print("models ready (%.0f s)" % (time.monotonic() - t0), flush=True)

    results = {"throughput": {m: {v: [] for v in variants} for m in models}, "start": {}}
    for r in range(args.rounds):
        for model in models:
            order = variants if r % 2 == 0 else list(reversed(variants))
            for variant in order:
                row = throughput(suite, variant, model, dirs, debian_worker, args.concurrency)
                results["throughput"][model][variant].append(row)
                print("round %d %-11s %-6s %8.1f req/s  p99 %8.0f us  errors %d" %
                      (r + 1, model, variant, row["ok_per_s"], row["p99_us"], row["errors"]),
                      flush=True)
    if not args.no_start:
        for model in models:
            for variant in variants:
                for launch in ("exec", "zygote"):
                    ms = launch_to_ready(suite, variant, model, dirs, debian_worker, launch)
                    results["start"]["%s/%s/%s" % (model, variant, launch)] = ms
                    print("launch->ready %-11s %-6s %-6s %7.0f ms" % (model, variant, launch, ms),
                          flush=True)

    print("\n| model | variant | req/s (median of %d) | p99 ms | vs TorchScript 2.15 | vs "
          "TorchScript 1.13 |" % args.rounds)
    print("| --- | --- | --- | --- | --- | --- |")
    for model in models:
        med = {v: statistics.median(x["ok_per_s"] for x in results["throughput"][model][v])
               for v in variants}
        for v in variants:
            p99 = statistics.median(x["p99_us"] for x in results["throughput"][model][v]) / 1000

            def ratio(base):
                return "%.2fx" % (med[v] / med[base]) if base in med and med[base] else "-"
            print("| %s | %s | %.1f | %.1f | %s | %s |" % (model, v, med[v], p99, ratio("ts215"),
                                                          ratio("ts113")))
    if results["start"]:
        print("\n| model | variant | exec launch->ready ms | zygote launch->ready ms |")
        print("| --- | --- | --- | --- |")
        for model in models:
            for v in variants:
                print("| %s | %s | %.0f | %.0f |" % (model, v, results["start"][model + "/" + v + "/exec"],
                                                     results["start"][model + "/" + v + "/zygote"]))
    results["commands"] = suite.recorder.commands
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
