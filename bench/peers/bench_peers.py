#!/usr/bin/env python3
"""Side by side with the servers users would pick instead (issue 31): torchfarm, TorchServe,
Triton (PyTriton), Ray Serve and LitServe on the same models, load and CPUs.

`make bench-peers` installs the peers (bench/peers/install_peers.sh into build/peers-venv),
writes the models (bench/peers/peer_models.py), builds the farm and the load generator in
build-release and runs this. Per round, per batching setting (default: max batch 16, 2 ms for
all; tuned: each server's own), per server in an order that rotates every round: start the server
with all models (2 workers x 1 thread per model), then per model and concurrency run the one
HTTP/1.1 keep-alive generator (torchfarm-v2-http-load) against its natural endpoint
(bench/peers/peer_wire.py); torchfarm also over ZeroMQ (`torchfarm bench`) and gRPC
(torchfarm-bench-grpc, when built) with the default setting. The tuned settings are measured at
c >= 16 only. The first round's first step per model is checked against PyTorch (4 answers).
perf_analyzer (tools/perf-analyzer) drives the two v2 servers too, once per model at c=16.
The generator's own ceiling is measured against torchfarm-http-echo first.

    .venv/bin/python bench/peers/bench_peers.py --build-dir build-release \
        [--quick] [--json FILE] [--markdown docs/benchmarks.md] [--servers torchfarm,litserve]
        [--models mlp] [--rounds 3] [--seconds 2] [--warmup 1] [--settings default,tuned]
        [--tune torchserve=64/10000] [--no-perf-analyzer] [--work DIR] [--estimate-only]

A server that fails to install or start, or answers wrongly, is reported in its rows (status,
note) and in the section, never left out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peer_measure  # noqa: E402
import peer_report  # noqa: E402
from peer_models import MODELS  # noqa: E402
from peer_servers import SERVER_CLASSES, Settings  # noqa: E402
from peer_wire import SERVERS  # noqa: E402

WORKERS = 2
DEFAULT = {"max_batch": 16, "delay_us": 2000}
# Each server's "tuned" setting: larger batches and waits, as each one's docs suggest for
# throughput (TorchServe's delay is whole milliseconds; Ray Serve's docs favour longer waits).
# torchfarm's also prepares each TorchScript module with optimize_for_inference (docs/models.md,
# "Optimizing a TorchScript model"): a setting of its own that none of the peers offers for a
# TorchScript file (Triton's PyTorch backend and TorchServe's handler serve the module as loaded).
TUNED = {
    "torchfarm": {"max_batch": 64, "delay_us": 1000, "optimize": "inference"},
    "torchserve": {"max_batch": 32, "delay_us": 5000},
    "triton": {"max_batch": 64, "delay_us": 5000},
    "rayserve": {"max_batch": 32, "delay_us": 10000},
    "litserve": {"max_batch": 32, "delay_us": 5000},
}
# Seconds a server takes to start with the three models on 2 cores (for the printed estimate;
# seen on a busy machine on 2026-12-03: 4, 37, 8-30, 33, 63).
START_S = {"torchfarm": 8, "torchserve": 40, "triton": 30, "rayserve": 45, "litserve": 60}


def concurrency_for(args, setting: str) -> list[int]:
    """The tuned settings are for throughput: measured at c >= 16 only (all when none is)."""
    if setting == "default":
        return args.concurrency
    return [c for c in args.concurrency if c >= 16] or args.concurrency


def settings_for(server: str, name: str) -> Settings:
    s = DEFAULT if name == "default" else TUNED[server]
    return Settings(name, WORKERS, s["max_batch"], s["delay_us"], s.get("optimize", "none"))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build-release")
    ap.add_argument("--peers-venv", default="build/peers-venv")
    ap.add_argument("--models-dir", default="build/peer-models")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--settings", default="default,tuned")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per step")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per step")
    ap.add_argument("--quick", action="store_true",
                    help="1 round, 1 s per step after 0.5 s, default settings only")
    ap.add_argument("--json", help="write the rows here (a JSON list)")
    ap.add_argument("--markdown", help="write the 'Against other servers' section into this file")
    ap.add_argument("--tune", action="append", default=[], metavar="SERVER=BATCH/DELAY_US",
                    help="replace a server's tuned setting, e.g. torchserve=64/10000 (repeatable)")
    ap.add_argument("--no-perf-analyzer", dest="perf_analyzer", action="store_false",
                    help="skip perf_analyzer (by default it runs once per v2 server and model, "
                         "c=16, first round, default settings)")
    ap.add_argument("--work", help="keep servers' configs and logs here (default: a temporary "
                    "folder, removed at the end)")
    ap.add_argument("--install-log", help="install_peers.sh's output, quoted when it failed")
    ap.add_argument("--estimate-only", action="store_true", help="print the plan's duration")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.settings = 1, 1.0, 0.5, "default"
    for what, allowed in (("servers", SERVERS), ("models", MODELS),
                          ("settings", ("default", "tuned"))):
        items = [t for t in getattr(args, what).split(",") if t]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            ap.error(f"--{what}: expected some of {','.join(allowed)}, got '{getattr(args, what)}'")
        setattr(args, what, items)
    for text in args.tune:
        try:
            server, value = text.split("=")
            batch, delay = (int(v) for v in value.split("/"))
            if server not in TUNED or not 1 <= batch <= 1024 or not 0 <= delay <= 1_000_000:
                raise ValueError(text)
        except ValueError:
            ap.error(f"--tune: expected SERVER=BATCH/DELAY_US with SERVER one of "
                     f"{','.join(TUNED)}, BATCH 1..1024, DELAY_US 0..1000000, got '{text}'")
        TUNED[server].update(max_batch=batch, delay_us=delay)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        ap.error(f"--concurrency: expected numbers like 1,16,64, got '{args.concurrency}'")
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        ap.error("--rounds must be >= 1, --seconds > 0 and --warmup >= 0")
    return args


def estimate_s(args) -> float:
    """The plan's duration: every step's warm-up and window plus each server's start."""
    step = args.warmup + args.seconds + 0.7
    steps = starts = 0
    for setting in args.settings:
        for server in args.servers:
            protocols = 3 if server == "torchfarm" and setting == "default" else 1
            steps += protocols * len(args.models) * len(concurrency_for(args, setting))
            starts += START_S[server]
    analyzed = len([s for s in args.servers if s in ("torchfarm", "triton")]) * len(args.models)
    perf_analyzer = analyzed * (4 * max(args.seconds, 3.0) + 3) if args.perf_analyzer else 0
    return args.rounds * (steps * step + starts) + len(args.concurrency) * step + perf_analyzer


def peers_state(args, peers_venv: Path) -> dict:
    """Why each peer cannot run ("" when it can): the venv and its stamp from install_peers.sh."""
    stamp = peers_venv / ".torchfarm-peers-stamp"
    reason = ""
    if not stamp.exists():
        reason = f"not installed: {peers_venv} has no install stamp (bench/peers/install_peers.sh failed"
        if args.install_log and Path(args.install_log).exists():
            tail = Path(args.install_log).read_text(errors="replace").strip().splitlines()[-3:]
            reason += ": " + " / ".join(tail)
        reason += ")"
    return {s: ("" if s == "torchfarm" else reason) for s in args.servers}


def main(argv=None) -> int:
    args = parse_args(argv)
    bin_dir = Path(args.build_dir).resolve() / "bin"
    peers_venv = Path(args.peers_venv).resolve()
    models_dir = Path(args.models_dir).resolve()
    models = {m: MODELS[m] for m in args.models}
    expected = estimate_s(args)
    print(f"bench-peers: {len(args.servers)} servers x {len(args.models)} models x "
          f"c={args.concurrency} x {len(args.settings)} settings x {args.rounds} rounds, "
          f"{args.seconds:g} s per step after {args.warmup:g} s: expected ~{expected / 60:.0f} min",
          flush=True)
    if args.estimate_only:
        return 0
    started = time.time()
    blocked = peers_state(args, peers_venv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="torchfarm-bench-peers-") as tmp:
        work = Path(args.work).resolve() if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        meter = peer_measure.Meter(bin_dir, models_dir, work, args.seconds, args.warmup)
        ceiling = meter.echo_ceiling(args.concurrency)
        rows = []
        for rnd in range(1, args.rounds + 1):
            order = args.servers[rnd - 1:] + args.servers[:rnd - 1]  # alternate who goes first
            for setting in args.settings:
                for server in order:
                    settings = settings_for(server, setting)
                    if blocked[server]:
                        rows += meter.not_run(server, models, concurrency_for(args, setting),
                                              settings, rnd,
                                              blocked[server])
                        continue
                    cls = SERVER_CLASSES[server]
                    instance = cls(settings, models, models_dir, work, peers_venv, bin_dir)
                    pa = 16 if rnd == 1 and setting == "default" and args.perf_analyzer else 0
                    rows += meter.run_server(instance, concurrency_for(args, setting), rnd,
                                             check=(rnd == 1), perf_analyzer_c=pa)
    elapsed = time.time() - started
    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "elapsed_s": elapsed, "expected_s": expected, "quick": args.quick,
        "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "ceiling": ceiling, "versions": peer_report.versions(peers_venv, bin_dir),
        "settings": {s: {n: settings_for(s, n).describe() for n in ("default", "tuned")}
                     for s in args.servers},
        "blocked": blocked,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        Path(args.json + ".meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    section = peer_report.section(rows, meta)
    print(section)
    if args.markdown and args.quick:
        print(f"bench-peers: --quick is a functional run: {args.markdown} left as it is")
    elif args.markdown:
        peer_report.write_section(Path(args.markdown), section)
    print(f"bench-peers: done in {elapsed / 60:.1f} min (expected ~{expected / 60:.0f} min)")
    return 0 if all(r["errors"] == 0 and r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
