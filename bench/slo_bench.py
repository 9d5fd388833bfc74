#!/usr/bin/env python3
"""Goodput under bursty load: latency_slo_ms against fixed batching settings (issue 32).

    .venv/bin/python bench/slo_bench.py --build-dir build [--models mlp] [--loads 0.5,0.8,1,1.2,1.5]
        [--seconds 10] [--slo-ms 20] [--rounds 1] [--json FILE] [--quick]

Models: mlp and convnet from torchfarm-mkmodel; transformer ([1, 32, 128], the test suite's encoder) exported with the
running interpreter's torch (tools/export_model.py: run it with .venv's python) and resnet18
(tools/export_torchvision.py, random weights). resnet18's SLO is 200 ms, the others' --slo-ms.
After the load steps, two tenants at 1:10 of 1.2 C together (`--clients 2 --client-rates`) against
the SLO config: the light tenant's p99 must stay within the SLO.

For each model: its capacity C (closed loop, 64 clients, the default config: 2 workers x 1
thread), then open-loop gamma arrivals (cv 4, one generator thread: `torchfarm bench --arrival
gamma --cv 4 --threads 1`) at each load x C, `--seconds` each, against
  - default: the documented defaults (max_batch_size 16 here, max_queue_delay_us 0),
  - slo: the same plus "latency_slo_ms" (nothing else tuned),
  - slo b32: "latency_slo_ms" with max_batch_size 32, the largest the grid may use (in SLO mode
    max_batch_size is only the cap of what the planner may choose),
  - slo client: "slo" with each request's deadline sent by the client (`--client-deadline`:
    scheduled send + the SLO), so the time before the supervisor reads a request counts,
  - the grid an offline sweep would try: max_queue_delay_us {0, 500, 2000} x max_batch_size {8, 32},
and prints the goodput (OK answers within the SLO per second, `--slo-ms`) of each, the best grid
point's, and the ratios the issue asks for (slo / best grid >= 0.95, slo / default at 1.2 C >= 1.3).
Only pyzmq and numpy beyond the standard library: .venv's or Debian's interpreter.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_suite  # noqa: E402

SHAPES = {"mlp": [1, 256], "convnet": [1, 3, 32, 32], "transformer": [1, 32, 128],
          "resnet18": [1, 3, 224, 224]}
# The SLO per model (ms): resnet18 takes ~100 ms a batch of 8 on one core here.
SLO_MS = {"resnet18": 200}
GRID = [(delay, batch) for delay in (0, 500, 2000) for batch in (8, 32)]


def configs(slo_ms):
    yield "default", {"max_batch_size": 16}
    yield "slo", {"max_batch_size": 16, "latency_slo_ms": slo_ms}
    yield "slo b32", {"max_batch_size": 32, "latency_slo_ms": slo_ms}
    # "slo" with each request's own deadline sent by the client (`bench --client-deadline`:
    # scheduled send + the SLO as deadline_unix_us), so the farm counts the time before it
    # reads a request.
    yield "slo client", {"max_batch_size": 16, "latency_slo_ms": slo_ms, "client_deadline": True}
    for delay, batch in GRID:
        yield "grid d%d b%d" % (delay, batch), {"max_batch_size": batch,
                                                "max_queue_delay_us": delay}


def entry(suite, model, settings):
    m = run_suite.model_entry(model, os.path.join(suite.models_dir, model + ".pt"),
                              SHAPES[model], 2, settings["max_batch_size"],
                              settings.get("max_queue_delay_us", 0))
    if "latency_slo_ms" in settings:
        m["latency_slo_ms"] = settings["latency_slo_ms"]
    return m


def export(suite, model):
    """transformer and resnet18 are exported into the suite's model folder by the running
    interpreter's torch (mlp and convnet come from torchfarm-mkmodel)."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(suite.models_dir, model + ".pt")
    if model == "transformer":
        argv = [sys.executable, os.path.join(root, "tools/export_model.py"), "--out",
                suite.models_dir, "--models", "transformer", "--skip-existing"]
    elif model == "resnet18":
        argv = [sys.executable, os.path.join(root, "tools/export_torchvision.py"), "--out", out]
    else:
        return
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(out):
        raise SystemExit("%s did not write %s" % (" ".join(argv), out))


def tenants(suite, model, rate, slo_ms):
    """Two tenants at 1:10 rates, `rate` together, against latency_slo_ms alone."""
    light, heavy = rate / 11, rate * 10 / 11
    settings = {"max_batch_size": 16, "latency_slo_ms": slo_ms}
    with run_suite.Farm(suite, "%s-tenants" % model, [entry(suite, model, settings)]) as farm:
        argv = [suite.bin("torchfarm"), "bench", "--endpoint", farm.endpoint, "--model", model,
                "--shape", ",".join(str(d) for d in SHAPES[model]), "--seconds",
                str(suite.seconds), "--warmup", str(suite.warmup), "--json", "--clients", "2",
                "--client-rates", "%.1f,%.1f" % (light, heavy), "--arrival", "gamma", "--cv", "4",
                "--slo-ms", str(slo_ms), "--io-timeout-ms", "30000"]
        report, ref = suite.recorder.run_json(argv)
    rows = report["steps"][0]["clients"]
    return {"light": rows[0], "heavy": rows[1], "cmd": ref}


def capacity(suite, model):
    with run_suite.Farm(suite, "capacity-" + model, [entry(suite, model, {"max_batch_size": 16})]) as farm:
        return suite.bench(farm.endpoint, model, SHAPES[model], [64])[0]["ok_per_s"]


def goodput(suite, model, name, settings, rate, slo_ms):
    farm_name = "%s-%s-%d" % (model, name.replace(" ", "-"), rate)
    with run_suite.Farm(suite, farm_name, [entry(suite, model, settings)]) as farm:
        extra = ["--rate", "%.0f" % rate, "--arrival", "gamma", "--cv", "4", "--threads", "1",
                 "--slo-ms", str(slo_ms), "--io-timeout-ms", "30000"]
        if settings.get("client_deadline"):
            extra.append("--client-deadline")
        step = suite.bench(farm.endpoint, model, SHAPES[model], [1], extra=extra)[0]
        farm_slo = farm_slo_counts(farm, model) if "latency_slo_ms" in settings else None
    return {"goodput": step["within_slo_per_s"], "ok_per_s": step["ok_per_s"],
            "p99_us": step["latency_us"]["p99"], "errors": step["errors"], "cmd": step["cmd"],
            "farm_slo": farm_slo}


def farm_slo_counts(farm, model):
    """The farm's own SLO count for `model` (`torchfarm stats`: arrival to reply, warm-up
    included): what its margin sees, against the client's p99 from each scheduled send."""
    try:
        stats = run_suite.admin_call(farm.admin, "stats")
    except Exception:  # noqa: BLE001 - a figure for the notes, not a result
        return None
    for m in stats.get("models", []):
        if m.get("name") == model and isinstance(m.get("slo"), dict):
            slo = m["slo"]
            answered = slo.get("within", 0) + slo.get("missed", 0)
            return {"within": slo.get("within"), "missed": slo.get("missed"),
                    "refused": slo.get("refused"), "margin": slo.get("margin"),
                    "missed_of_answered": slo.get("missed", 0) / answered if answered else None}
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--models", default="mlp")
    parser.add_argument("--loads", default="0.5,0.8,1,1.2,1.5")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--slo-ms", type=int, default=20)
    parser.add_argument("--json", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--configs", default="",
                        help="only these configs, comma separated (e.g. default,slo); the grid "
                             "columns then compare with the best grid point measured")
    parser.add_argument("--no-tenants", action="store_true", help="skip the two-tenant step")
    args = parser.parse_args()
    suite = run_suite.Suite(args)
    suite.seconds = 1.0 if args.quick else args.seconds
    suite.warmup = 0.5 if args.quick else args.warmup
    os.makedirs(suite.models_dir, exist_ok=True)
    import subprocess
    subprocess.run([suite.bin("torchfarm-mkmodel"), "--all", suite.models_dir], check=True,
                   stdout=subprocess.DEVNULL)
    loads = [float(x) for x in args.loads.split(",")]
    wanted = set(filter(None, args.configs.split(",")))
    report = {"slo_ms": args.slo_ms, "seconds": suite.seconds, "models": {}}
    for model in args.models.split(","):
        export(suite, model)
        slo_ms = SLO_MS.get(model, args.slo_ms)
        cap = capacity(suite, model)
        rows = []
        for load in loads:
            rate = load * cap
            row = {"load": load, "rate": rate}
            for name, settings in configs(slo_ms):
                if wanted and name not in wanted:
                    continue
                row[name] = goodput(suite, model, name, settings, rate, slo_ms)
                suite.log("%s %.1fC %s: goodput %.0f/s" % (model, load, name, row[name]["goodput"]))
            grid = [(row[n]["goodput"], n) for n, _ in configs(slo_ms)
                    if n.startswith("grid") and n in row]
            best = max(grid) if grid else (0.0, "slo")
            row["best_grid"] = best[1]
            if "slo" in row:
                row["slo_vs_best_grid"] = row["slo"]["goodput"] / max(best[0], 1e-9)
            if "slo" in row and "default" in row:
                row["slo_vs_default"] = row["slo"]["goodput"] / max(row["default"]["goodput"],
                                                                    1e-9)
            if "slo b32" in row:
                row["slo_b32_vs_best_grid"] = row["slo b32"]["goodput"] / max(best[0], 1e-9)
            rows.append(row)
        two = None if args.no_tenants else tenants(suite, model, 1.2 * cap, slo_ms)
        report["models"][model] = {"capacity": cap, "slo_ms": slo_ms, "rows": rows,
                                   "tenants": two}
        print("\n%s: capacity %.0f/s, SLO %d ms, gamma cv 4, goodput (OK within the SLO) per s"
              % (model, cap, slo_ms))
        names = [n for n, _ in configs(slo_ms) if any(n in row for row in rows)]
        print("| load | " + " | ".join("%s goodput / p99 ms / refused / farm-seen late" % n
                                       for n in names) + " | best grid | slo/best grid | "
              "slo/default |")
        print("| --- " * (len(names) + 4) + "|")
        for row in rows:
            cells = []
            for n in names:
                c = row[n]
                farm = c.get("farm_slo") or {}
                late = farm.get("missed_of_answered")
                cells.append("%.0f / %.1f / %s / %s" % (
                    c["goodput"], c["p99_us"] / 1000, c["errors"],
                    "-" if late is None else "%.2f%%" % (100 * late)))
            ratio = lambda key: "%.2f" % row[key] if key in row else "-"  # noqa: E731
            print("| %.1f C | %s | %s | %s | %s |" % (
                row["load"], " | ".join(cells),
                "%.0f (%s)" % (row[row["best_grid"]]["goodput"], row["best_grid"])
                if row["best_grid"] in row else "-",
                ratio("slo_vs_best_grid"), ratio("slo_vs_default")))
        for name in ("light", "heavy") if two else ():
            c = two[name]
            print("two tenants 1:10 at 1.2 C, %s: %s" % (name, json.dumps(
                {"target_rate": c["target_rate"], "sent": c["sent"], "ok": c["ok"],
                 "error_count": c["error_count"], "p50_ms": c["latency_us"]["p50"] / 1000,
                 "p99_ms": c["latency_us"]["p99"] / 1000, "within_slo": c.get("within_slo")})))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
